"""What kinds of layers a layout puts where: each chunk's and each rank's ``dense``/``moe``
layers and ``mtp`` modules (``chunk_kinds``, ``stage_content``, ``order_chunk_kinds``), under
the even split (``even_stage_content``) and over the search's arrays of plans
(``even_stage_content_arrays``, ``even_chunks_content_arrays``).
"""
from __future__ import annotations

from functools import lru_cache

from strategies.errors import SpecError
from strategies.layout.build import even_layout
from strategies.layout.grammar import MTP
from strategies.layout.record import PipelineLayout
from strategies.model import ModelSpec


def chunk_kinds(model: ModelSpec, layout: PipelineLayout, rank: int,
                chunk: int) -> dict[str, int]:
    """How many layers of each kind ``rank``'s ``chunk`` holds: ``dense``/``moe``
    (``ModelSpec.is_moe_layer`` of each layer index) and ``mtp`` modules; kinds with no
    layer left out."""
    out: dict[str, int] = {}
    kinds = model.layer_kinds() if model.is_hybrid else None
    for i in layout.layer_ids(rank, chunk):
        k = kinds[i] if kinds else "moe" if model.is_moe_layer(i) else "dense"
        out[k] = out.get(k, 0) + 1
    n = layout.held[rank][chunk].count(MTP)
    if n:
        out["mtp"] = n
    return out


def mixed_layers(model: ModelSpec) -> bool:
    """Whether ``model`` holds layers of more than one kind (dense and MoE) or
    multi-token-prediction modules: then a rank's parameters and stash depend on which kinds
    it holds (``stage_content``), not on its layer count alone."""
    return sum(1 for n in model.layer_counts().values() if n) > 1 \
        or bool(model.num_nextn_predict_layers)


def stage_content(model: ModelSpec, layout: PipelineLayout,
                  rank: int) -> tuple[tuple[str, int], ...]:
    """``(kind, count)`` of what pipeline rank ``rank`` holds under ``layout``
    (``dense``/``moe`` layers, ``mtp`` modules): ``chunk_kinds`` summed over its chunks. The
    one reading of a layout by kind that the memory model takes (``strategies.memory``)."""
    out: dict[str, int] = {}
    for c in range(layout.vpp):
        for k, n in chunk_kinds(model, layout, rank, c).items():
            out[k] = out.get(k, 0) + n
    return tuple(out.items())


@lru_cache(maxsize=4096)
def even_stage_content(model: ModelSpec, schedule: str, pp: int, vpp: int,
                       rank: int, first: int = 0, last: int = 0,
                       account: bool = False) -> tuple[tuple[str, int], ...]:
    """``(kind, count)`` of what pipeline rank ``rank`` holds under the even split
    (``dense``/``moe`` layers, ``mtp`` modules): ``chunk_kinds`` summed over its chunks. What
    the array code (the search's memory model) reads for plans without a layout string;
    ``first``/``last`` (``first/last_stage_layers``, 0: not given) and ``account`` (the
    embedding and the loss as layer slots) give the uneven layouts the search proposes."""
    return stage_content(model, even_layout(model, schedule, pp, vpp, first, last, account),
                         rank)



def even_stage_content_arrays(model: ModelSpec, codes, pp, vpp, rank, first=0, last=0,
                              account=False, strict: bool = True) -> dict:
    """``even_stage_content`` for arrays of plans (schedule codes, pp, vpp, the rank, and
    the uneven layouts' ``first``/``last``/``account``): ``{kind: counts}`` (numpy arrays;
    ``dense``, ``moe`` and ``mtp`` always present). ``strict=False``: a plan whose columns
    give no layout (the layers do not split evenly: a job with a layout string) gets NaN
    counts instead of the ``SpecError``."""
    def one(name, p, v, r, f, la, a, _c):
        if strict:
            return even_stage_content(model, name, p, v, r, f, la, a)
        try:
            return even_stage_content(model, name, p, v, r, f, la, a)
        except SpecError:
            return (("dense", float("nan")),)
    return _content_arrays(one, codes, pp, vpp, rank, first, last, account,
                           kinds=model.cost_kinds() + ("mtp",))[0]


def order_chunk_kinds(model: ModelSpec, layout: PipelineLayout, rank: int, chunk: int,
                      mirrored: bool) -> dict[str, int]:
    """``chunk_kinds`` of the chunk a schedule's order calls ``chunk`` on ``rank``
    (``Step.chunk``): a mirrored schedule's (DualPipe, ``pp > 1``) chunk 1 is its copy of
    stage ``pp-1-rank``, held there as chunk 0."""
    if mirrored and layout.pp > 1:
        return chunk_kinds(model, layout, rank if chunk == 0 else layout.pp - 1 - rank, 0)
    return chunk_kinds(model, layout, rank, chunk)


def even_chunks_content_arrays(model: ModelSpec, codes, pp, vpp, rank, chunks, first=0,
                               last=0, account=False) -> list[dict]:
    """``order_chunk_kinds`` of each chunk id in ``chunks`` (ints) under the even split (or
    the uneven ``first``/``last``/``account`` layouts the search proposes) for arrays of
    plans, as ``even_stage_content_arrays``: one ``{kind: counts}`` per chunk id (zeros
    where the rank has no such chunk); the plans' distinct rows found once for all the
    chunks."""
    from strategies.schedules import get_schedule

    def one(name, p, v, r, f, la, a, c):
        sched = get_schedule(name)
        if c >= sched.order_chunks(p, v):
            return ()
        mirrored = bool(sched.mirrored) and p > 1
        return tuple(order_chunk_kinds(model, even_layout(model, name, p, v, f, la, a), r,
                                       c, mirrored).items())
    return _content_arrays(one, codes, pp, vpp, rank, first, last, account, chunks,
                           model.cost_kinds() + ("mtp",))


def _content_arrays(one, codes, pp, vpp, rank, first, last, account, chunks=(0,),
                    kinds=("dense", "moe", "mtp")) -> list[dict]:
    """``{kind: counts}`` of ``one(schedule name, pp, vpp, rank, first, last, account,
    chunk)`` (``(kind, count)`` pairs) over broadcast arrays, once per distinct row and chunk
    id: one dict per chunk id of ``chunks``."""
    import numpy as np

    from strategies.schedules import schedule_of_code
    codes, pp, vpp, rank, first, last, account = np.broadcast_arrays(
        np.asarray(codes), np.asarray(pp), np.asarray(vpp), np.asarray(rank),
        np.asarray(first), np.asarray(last), np.asarray(account))
    chunks = [int(c) for c in chunks]
    keys = np.stack([codes.ravel(), pp.ravel(), vpp.ravel(), rank.ravel(), first.ravel(),
                     last.ravel(), account.ravel()], axis=1).astype(np.int64)
    if not len(keys):
        return [{k: np.zeros(codes.shape) for k in kinds} for _ in chunks]
    dims = keys.max(axis=0) + 1
    if np.prod(dims.astype(float)) < 2.0 ** 62:
        # one integer per row: a 1-d unique sorts far faster than rows of seven
        flat, inv = np.unique(np.ravel_multi_index(keys.T, dims), return_inverse=True)
        uniq = np.stack(np.unravel_index(flat, dims), axis=1)
    else:
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    # each chunk's and distinct row's content
    table = np.zeros((len(kinds), len(chunks), len(uniq)))
    for j, (code, p, v, r, f, la, a) in enumerate(uniq.tolist()):
        name = schedule_of_code(int(code)).name
        for i, c in enumerate(chunks):
            for k, n in one(name, int(p), int(v), int(r), int(f), int(la), bool(a), c):
                table[kinds.index(k), i, j] = n
    inv = inv.ravel()
    return [{k: table[i, c][inv].reshape(codes.shape) for i, k in enumerate(kinds)}
            for c in range(len(chunks))]

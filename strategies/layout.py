"""Pipeline layouts: which layers each (pipeline rank, model chunk) holds.

``PipelineLayout`` is the one representation of how a plan cuts the model into pipeline
stages: for every virtual stage (a position on the micro-batch's path), the slots it holds,
``E`` (embedding), ``t`` (transformer layer), ``m`` (multi-token-prediction module) and ``L``
(LM head and loss). ``Job.layers_of_stage``, the stage-cost record's per-chunk costs
(``strategies.cost.stage``), memory and the compiler read it; ``Plan.layers_per_stage`` is
one of the ways of giving it and ``PipelineLayout.layers_per_stage`` its view.

It is built (``build_layout``) from the first of:

* ``layout``: Megatron-LM's ``--pipeline-model-parallel-layout`` string (``parse_layout``;
  the grammar: docs/layout.md);
* ``first_stage_layers`` / ``last_stage_layers``: Megatron's
  ``--decoder-first/last-pipeline-num-layers`` (the middle stages even; each stage's layers
  split evenly over its ``vpp`` chunks);
* ``account_embedding`` / ``account_loss``: Megatron's
  ``--account-for-embedding/loss-in-pipeline-split`` (NeMo's Llama 3.1 405B recipe): the
  embedding and the loss each count as one layer slot when the layers are divided;
* ``layers_per_stage`` (one chunk per rank);
* the even split, ``num_layers / (pp·vpp)`` per chunk.

The embedding sits on the first position and the loss on the last (Megatron requires it);
multi-token-prediction modules, unless a layout string places them, on the last position
before the loss (Megatron's default). Pure functions; no SimPy, no numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from strategies.errors import SpecError
from strategies.model import ModelSpec
from strategies.schedules import get_schedule

EMBEDDING, LAYER, MTP, LOSS = "E", "t", "m", "L"
SYMBOLS = {EMBEDDING: "embedding", LAYER: "transformer layer", MTP: "multi-token prediction",
           LOSS: "LM head and loss"}
MAX_LAYOUT_CHARS = 4096          # a layout string longer than this is refused
MAX_EXPANDED = 1 << 16           # slots after expanding repetitions


# ----------------------------------------------------------------------------- the grammar

def parse_layout(text: str, field: str = "layout") -> tuple[tuple[str, ...], ...]:
    """The virtual stages a Megatron layout string names, in path order: ``|`` separates
    stages, ``E t m L`` are slots, ``X*N`` repeats one symbol (``|`` included),
    ``(...)*N`` repeats a group (groups may nest), commas and spaces are cosmetic.
    ``SpecError(field, text, rule)`` where it does not parse.

    >>> parse_layout("Et*3|(tt|)*2,m|L")
    (('E', 't', 't', 't'), ('t', 't'), ('t', 't'), ('m',), ('L',))
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, text, "must be a Megatron pipeline layout string, e.g. "
                        "'Et|(tt|)*3,tL' (docs/layout.md)")
    if len(text) > MAX_LAYOUT_CHARS:
        raise SpecError(field, text[:40] + "...", f"must be at most {MAX_LAYOUT_CHARS} "
                        "characters")
    src = text.replace(",", "").replace(" ", "")
    flat, pos = _sequence(src, 0, text, field, depth=0)
    if pos != len(src):
        raise SpecError(field, text, f"unmatched ')' at character {pos + 1}")
    return tuple(tuple(stage) for stage in "".join(flat).split("|"))


def _sequence(src: str, pos: int, text: str, field: str, depth: int) -> tuple[list[str], int]:
    """Items from ``pos`` up to a closing ``)`` or the end: ``(expanded symbols, position)``."""
    out: list[str] = []
    while pos < len(src) and src[pos] != ")":
        c = src[pos]
        if c == "(":
            inner, pos = _sequence(src, pos + 1, text, field, depth + 1)
            if pos >= len(src):
                raise SpecError(field, text, "has a '(' without its ')'")
            pos += 1
            if pos >= len(src) or src[pos] != "*":
                raise SpecError(field, text, f"a group '(...)' must be followed by *N "
                                f"(character {pos + 1})")
            unit = inner
        elif c in SYMBOLS or c == "|":
            unit, pos = [c], pos + 1
        else:
            raise SpecError(field, text, f"unknown symbol {c!r} at character {pos + 1}; "
                            "allowed: E (embedding), t (transformer layer), m (MTP), L (loss), "
                            "| (stage separator), *N (repeat), ( ) (group)")
        times = 1
        if pos < len(src) and src[pos] == "*":
            end = pos + 1
            while end < len(src) and src[end].isdigit():
                end += 1
            if end == pos + 1:
                raise SpecError(field, text, f"'*' must be followed by a count (character "
                                f"{pos + 2})")
            times, pos = int(src[pos + 1:end]), end
            if times < 1:
                raise SpecError(field, text, "a repeat count *N must be >= 1")
        if len(out) + len(unit) * times > MAX_EXPANDED:
            raise SpecError(field, text, f"expands to more than {MAX_EXPANDED} symbols")
        out += unit * times
    if depth == 0 and pos < len(src):
        return out, pos
    return out, pos


def layout_text(stages: tuple[tuple[str, ...], ...]) -> str:
    """The compact Megatron string of ``stages`` (path order): each stage's runs as ``X*N``,
    runs of equal stages as ``(S|)*N``; ``parse_layout`` gives ``stages`` back.

    >>> layout_text((("E", "t"), ("t", "t"), ("t", "t"), ("t", "L")))
    'Et|(t*2|)*2,tL'
    """
    def one(stage: tuple[str, ...]) -> str:
        out, i = [], 0
        while i < len(stage):
            j = i
            while j < len(stage) and stage[j] == stage[i]:
                j += 1
            out.append(stage[i] + (f"*{j - i}" if j - i > 1 else ""))
            i = j
        return "".join(out)

    parts, i, n = [], 0, len(stages)
    while i < n:
        j = i
        while j < n and stages[j] == stages[i]:
            j += 1
        run, last = j - i, j == n
        s = one(stages[i])
        if run > 1 and not last:
            parts.append(f"({s}|)*{run},")
        elif run > 1:                                # the final run: no trailing separator
            parts.append(f"({s}|)*{run - 1},{s}")
        else:
            parts.append(s + ("" if last else "|"))
        i = j
    return "".join(parts)


# ----------------------------------------------------------------------------- the record

@dataclass(frozen=True)
class PipelineLayout:
    """The slots each ``(pipeline rank, chunk)`` holds. ``stages``: per virtual stage in
    path order (Megatron's: position ``chunk·pp + rank`` on the interleaved ring), its slots;
    ``positions``: the ``(rank, chunk)`` of each (the schedule's placement,
    ``Schedule.rank_chunk``). ``source``: how the plan gave it (``layout``, ``first/last``,
    ``account``, ``layers_per_stage``, ``even``)."""

    pp: int
    vpp: int
    stages: tuple[tuple[str, ...], ...]
    positions: tuple[tuple[int, int], ...]
    source: str = "even"

    @property
    def text(self) -> str:
        """Megatron's ``--pipeline-model-parallel-layout`` string of this layout."""
        return layout_text(self.stages)

    @property
    def held(self) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """``held[rank][chunk]``: the slots of each rank's chunks."""
        out = [[() for _ in range(self.vpp)] for _ in range(self.pp)]
        for st, (r, c) in zip(self.stages, self.positions):
            out[r][c] = st
        return tuple(tuple(h) for h in out)

    def slots(self, rank: int, chunk: int) -> tuple[str, ...]:
        return self.stages[self.positions.index((rank, chunk))]

    def layers(self, rank: int, chunk: int) -> int:
        """Transformer layers of ``rank``'s ``chunk``."""
        return self.slots(rank, chunk).count(LAYER)

    def layers_of_stage(self, rank: int) -> int:
        """Transformer layers of pipeline rank ``rank``, all its chunks."""
        return sum(st.count(LAYER) for st, (r, _) in zip(self.stages, self.positions)
                   if r == rank)

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        return tuple(self.layers_of_stage(r) for r in range(self.pp))

    def mtp_of_stage(self, rank: int) -> int:
        """Multi-token-prediction modules on pipeline rank ``rank``."""
        return sum(st.count(MTP) for st, (r, _) in zip(self.stages, self.positions)
                   if r == rank)

    def layer_ids(self, rank: int, chunk: int) -> range:
        """Indices (0-based, model order) of the transformer layers ``rank``'s ``chunk``
        holds: the layers are numbered along the path."""
        start = 0
        for st, where in zip(self.stages, self.positions):
            if where == (rank, chunk):
                return range(start, start + st.count(LAYER))
            start += st.count(LAYER)
        raise SpecError("chunk", (rank, chunk), f"not in the layout (pp={self.pp}, "
                        f"vpp={self.vpp})")

    @property
    def uniform(self) -> bool:
        """Every virtual stage holds the same number of layers, the embedding first and the
        loss last and nothing else (the even split the mean-layer formulas assume)."""
        n = {st.count(LAYER) for st in self.stages}
        extra = sum(len(st) - st.count(LAYER) for st in self.stages)
        return (len(n) == 1 and extra == 2 and self.stages[0][0] == EMBEDDING
                and self.stages[-1][-1] == LOSS)

    def table(self) -> list[str]:
        """One line per run of equal pipeline ranks: the slots of each chunk (for reports)."""
        held = self.held
        rows, r = [], 0
        while r < self.pp:
            s = r
            while s + 1 < self.pp and held[s + 1] == held[r]:
                s += 1
            ranks = f"rank {r}" if s == r else f"ranks {r}-{s}"
            rows.append(f"{ranks:<12}" + "  ".join(f"{layout_text((c,)) or '-':<7}"
                                                   for c in held[r]).rstrip())
            r = s + 1
        return rows

    def to_dict(self) -> dict:
        return {"text": self.text, "source": self.source,
                "layers_per_stage": list(self.layers_per_stage),
                "layers_per_chunk": [[self.layers(r, c) for c in range(self.vpp)]
                                     for r in range(self.pp)]}


def _rank_chunk(schedule: str, position: int, pp: int, vpp: int) -> tuple[int, int]:
    """``(rank, chunk)`` of virtual stage ``position``: the schedule's placement where a
    micro-batch's path crosses every chunk (``num_virtual_stages = pp·vpp``: the ring, the
    V), else (DualPipe's two paths) Megatron's ring numbering of the ``pp·vpp`` chunks."""
    sched = get_schedule(schedule)
    if sched.num_virtual_stages(pp, vpp) == pp * vpp:
        r, c = sched.rank_chunk(position, pp, vpp, 0)
        return int(r), int(c)
    return position % pp, position // pp


def _place(stages: list[tuple[str, ...]], schedule: str, pp: int, vpp: int,
           source: str) -> PipelineLayout:
    """``stages`` (path order) placed on ranks and chunks by ``schedule``'s placement."""
    pos = tuple(_rank_chunk(schedule, p, pp, vpp) for p in range(len(stages)))
    return PipelineLayout(pp, vpp, tuple(tuple(s) for s in stages), pos, source)


# ----------------------------------------------------------------------------- from a plan

def layout_string_extremes(plan) -> tuple[float, float, float, float, float] | None:
    """What the lower bound reads of a plan's layout string or ``layers_per_stage`` (None
    without either): ``(first, mid, last, least, most)``, the transformer layers of pipeline
    rank 0, rank ``pp-2`` and rank ``pp-1`` (all their chunks; a mirrored schedule, DualPipe:
    per copy, the mean of the two stages the rank holds, ``plan_arrays.rank_layers``'s rule)
    and the fewest and most layers any one virtual stage holds. The layout string alone says
    these (no model).

    >>> from strategies.plan import Plan
    >>> layout_string_extremes(Plan(pp=4, schedule="dualpipe", layout="Et*6|t*2|t*3|t*5L"))
    (5.5, 2.5, 5.5, 2.0, 6.0)

    ``layers_per_stage`` (one chunk per rank, never mirrored: ``plan._check_layers_per_stage``)
    is the layout string with those counts, read the same way:

    >>> layout_string_extremes(Plan(pp=4, layers_per_stage=(3, 9, 1, 3)))
    (3.0, 1.0, 3.0, 1.0, 9.0)
    """
    got = _rank_and_stage_layers(plan)
    if got is None:
        return None
    per_rank, n = got
    pp = plan.pp
    return (float(per_rank[0]), float(per_rank[max(pp - 2, 0)]), float(per_rank[pp - 1]),
            float(min(n)), float(max(n)))


def layout_middle_most(plan) -> float:
    """The most transformer layers any middle pipeline rank (1 to ``pp-2``) holds under the
    plan's layout string or ``layers_per_stage`` (per copy under DualPipe, as
    ``layout_string_extremes``); NaN without either or with ``pp < 3``. The lower bound prices
    that rank at the least position a middle rank has.

    >>> from strategies.plan import Plan
    >>> layout_middle_most(Plan(pp=4, layers_per_stage=(3, 9, 1, 3)))
    9.0
    """
    got = _rank_and_stage_layers(plan)
    if got is None or plan.pp < 3:
        return float("nan")
    return float(max(got[0][1:plan.pp - 1]))


def _rank_and_stage_layers(plan) -> tuple[list[float], list[int]] | None:
    """Each rank's transformer layers (per copy under a mirrored schedule) and each virtual
    stage's, of the plan's layout string or ``layers_per_stage``; None without either."""
    stages = plan_layout_stages(plan)
    if stages is None:
        lps = getattr(plan, "layers_per_stage", None)
        return None if lps is None else ([float(x) for x in lps], list(lps))
    pp, vpp = plan.pp, plan.vpp
    lay = _place(list(stages), plan.schedule, pp, vpp, "layout")
    per_rank = [lay.layers_of_stage(r) for r in range(pp)]
    if get_schedule(plan.schedule).mirrored and pp > 1:
        per_rank = [(per_rank[r] + per_rank[pp - 1 - r]) / 2 for r in range(pp)]
    return per_rank, [st.count(LAYER) for st in stages]


def plan_layout_stages(plan, field: str = "layout") -> tuple[tuple[str, ...], ...] | None:
    """The plan's layout string parsed and checked against its shape (``pp·vpp`` virtual
    stages, none empty); None when the plan gives none. The rules that need no model."""
    if plan.layout is None:
        return None
    stages = parse_layout(plan.layout, field)
    n = plan.pp * plan.vpp
    if get_schedule(plan.schedule).num_virtual_stages(plan.pp, plan.vpp) != n:
        raise SpecError(field, plan.layout, f"needs a schedule whose micro-batches cross every "
                        f"chunk (schedule={plan.schedule} runs two directions)")
    if len(stages) != n:
        raise SpecError(field, plan.layout, f"must name pp*vpp = {plan.pp}*{plan.vpp} = {n} "
                        f"stages (separated by '|'), not {len(stages)}")
    for i, st in enumerate(stages):
        if not st:
            raise SpecError(field, plan.layout, f"leaves stage {i} empty (each of the "
                            f"{n} stages must hold at least one of E, t, m, L)")
    return stages


def _check_against_model(stages, model: ModelSpec, text: str, field: str) -> None:
    """Megatron's rules between a layout and a model: one embedding, first; one loss, last;
    ``num_layers`` transformer layers; ``num_nextn_predict_layers`` MTP modules, after every
    transformer layer."""
    flat = [s for st in stages for s in st]
    if flat[0] != EMBEDDING or flat.count(EMBEDDING) != 1:
        raise SpecError(field, text, "must hold the embedding E exactly once, as the first slot")
    if flat[-1] != LOSS or flat.count(LOSS) != 1:
        raise SpecError(field, text, "must hold the loss L exactly once, as the last slot")
    n = flat.count(LAYER)
    if n != model.num_layers:
        raise SpecError(field, text, f"must hold num_layers={model.num_layers} transformer "
                        f"layers t, not {n}")
    k = flat.count(MTP)
    if k != model.num_nextn_predict_layers:
        raise SpecError(field, text, f"must hold num_nextn_predict_layers="
                        f"{model.num_nextn_predict_layers} MTP modules m, not {k}")
    if k and LAYER in flat[flat.index(MTP):]:
        raise SpecError(field, text, "must place the MTP modules m after every transformer "
                        "layer t")


def _even_chunks(n: int, parts: int, field: str, value, what: str) -> list[int]:
    if parts <= 0:
        return []
    if n % parts:
        raise SpecError(field, value, f"{what}: {n} layers must divide evenly over {parts} "
                        "model chunks")
    return [n // parts] * parts


def _counts(model: ModelSpec, plan) -> tuple[list[int], str]:
    """Transformer layers per virtual stage (path order) and the source, for plans without a
    layout string."""
    L, pp, vpp = model.num_layers, plan.pp, plan.vpp
    n, k = pp * vpp, vpp
    f, la = plan.first_stage_layers, plan.last_stage_layers
    if f is not None or la is not None:
        middle_ranks = pp - (f is not None) - (la is not None)
        rest = L - (f or 0) - (la or 0)
        text = f"first_stage_layers={f}, last_stage_layers={la}"
        if rest < 0 or (rest > 0) != (middle_ranks > 0):
            raise SpecError("first_stage_layers" if f is not None else "last_stage_layers",
                            f if f is not None else la,
                            f"leaves {rest} layers for {middle_ranks} middle stages "
                            f"(num_layers={L}, pp={pp})")
        mid = _even_chunks(rest, middle_ranks, "first_stage_layers" if f is not None
                           else "last_stage_layers", text, "the middle stages")
        per_rank = ([f] if f is not None else []) + mid + ([la] if la is not None else [])
        per_rank = [x for x in per_rank]
        by_rank = [_even_chunks(x, k, "first_stage_layers" if r == 0 and f is not None else
                                "last_stage_layers" if r == pp - 1 and la is not None else
                                "num_layers", x, f"stage {r} (vpp={vpp})")
                   for r, x in enumerate(per_rank)]
        return _by_path(by_rank, plan), "first/last"
    if plan.account_embedding or plan.account_loss:
        slots = L + plan.account_embedding + plan.account_loss
        if slots % n:
            raise SpecError("num_layers", L, f"with the embedding ({plan.account_embedding}) "
                            f"and the loss ({plan.account_loss}) counted as layers, "
                            f"num_layers + {slots - L} = {slots} must be divisible by "
                            f"pp*vpp = {n}")
        counts = [slots // n] * n
        counts[0] -= plan.account_embedding
        counts[-1] -= plan.account_loss
        return counts, "account"
    if plan.layers_per_stage is not None:
        if sum(plan.layers_per_stage) != L:
            raise SpecError("layers_per_stage", "/".join(map(str, plan.layers_per_stage)),
                            f"must sum to num_layers={L} (sums to {sum(plan.layers_per_stage)})")
        return _by_path([[x] for x in plan.layers_per_stage], plan), "layers_per_stage"
    if L % n:
        what = f"pp*vpp = {pp}*{vpp} = {n}" if vpp > 1 else f"pp={pp}"
        raise SpecError("num_layers", L, f"must be divisible by {what} (or give layout=, "
                        "first_stage_layers=/last_stage_layers= or account_embedding/"
                        "account_loss: docs/layout.md)")
    return [L // n] * n, "even"


def _by_path(by_rank: list[list[int]], plan) -> list[int]:
    """Per-rank, per-chunk counts in path order (the schedule's placement)."""
    out = []
    for pos in range(plan.pp * plan.vpp):
        r, c = _rank_chunk(plan.schedule, pos, plan.pp, plan.vpp)
        out.append(by_rank[r][c])
    return out


def build_layout(model: ModelSpec, plan) -> PipelineLayout:
    """The layout of ``plan`` for ``model`` (module docstring: which plan field wins);
    ``SpecError`` naming the field, the value and the rule."""
    return _build_layout(model, plan.pp, plan.vpp, plan.schedule, plan.layout,
                         plan.first_stage_layers, plan.last_stage_layers,
                         plan.account_embedding, plan.account_loss, plan.layers_per_stage)


@lru_cache(maxsize=1024)
def _build_layout(model: ModelSpec, pp: int, vpp: int, schedule: str, layout: str | None,
                  first_stage_layers: int | None, last_stage_layers: int | None,
                  account_embedding: bool, account_loss: bool,
                  layers_per_stage: tuple[int, ...] | None) -> PipelineLayout:
    from types import SimpleNamespace
    plan = SimpleNamespace(pp=pp, vpp=vpp, schedule=schedule, layout=layout,
                           first_stage_layers=first_stage_layers,
                           last_stage_layers=last_stage_layers,
                           account_embedding=account_embedding, account_loss=account_loss,
                           layers_per_stage=layers_per_stage)
    pp, vpp = plan.pp, plan.vpp
    stages = plan_layout_stages(plan)
    if stages is not None:
        _check_against_model(stages, model, plan.layout, "layout")
        return _place(list(stages), plan.schedule, pp, vpp, "layout")
    counts, source = _counts(model, plan)
    return _from_counts(model, plan, counts, source)


def _from_counts(model: ModelSpec, plan, counts: list[int], source: str) -> PipelineLayout:
    """Virtual stages of ``counts`` layers (path order), the embedding first, the
    multi-token-prediction modules and the loss last."""
    pp, vpp = plan.pp, plan.vpp
    out = [[LAYER] * c for c in counts]
    out[0].insert(0, EMBEDDING)
    out[-1] += [MTP] * model.num_nextn_predict_layers + [LOSS]
    for i, st in enumerate(out):
        if not st:
            raise SpecError("num_layers", model.num_layers, f"the {source} split leaves "
                            f"virtual stage {i} empty (pp={pp}, vpp={vpp})")
    return _place([tuple(st) for st in out], plan.schedule, pp, vpp, source)


def chunk_kinds(model: ModelSpec, layout: PipelineLayout, rank: int,
                chunk: int) -> dict[str, int]:
    """How many layers of each kind ``rank``'s ``chunk`` holds: ``dense``/``moe``
    (``ModelSpec.is_moe_layer`` of each layer index) and ``mtp`` modules; kinds with no
    layer left out."""
    out: dict[str, int] = {}
    for i in layout.layer_ids(rank, chunk):
        k = "moe" if model.is_moe_layer(i) else "dense"
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
    return stage_content(model, _even_layout(model, schedule, pp, vpp, first, last, account),
                         rank)


def _even_layout(model: ModelSpec, schedule: str, pp: int, vpp: int, first: int = 0,
                 last: int = 0, account: bool = False) -> PipelineLayout:
    """``build_layout`` of a plan with no layout string: the even split, or the search's
    uneven ``first``/``last`` (0: not given) with ``account`` (the embedding and the loss as
    layer slots)."""
    return _build_layout(model, pp, vpp, schedule, None, first or None, last or None,
                         account, account, None)


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
    return _content_arrays(one, codes, pp, vpp, rank, first, last, account)[0]


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
        return tuple(order_chunk_kinds(model, _even_layout(model, name, p, v, f, la, a), r,
                                       c, mirrored).items())
    return _content_arrays(one, codes, pp, vpp, rank, first, last, account, chunks)


def _content_arrays(one, codes, pp, vpp, rank, first, last, account, chunks=(0,)
                    ) -> list[dict]:
    """``{kind: counts}`` of ``one(schedule name, pp, vpp, rank, first, last, account,
    chunk)`` (``(kind, count)`` pairs) over broadcast arrays, once per distinct row and chunk
    id: one dict per chunk id of ``chunks``."""
    import numpy as np

    from strategies.schedules import schedule_of_code
    codes, pp, vpp, rank, first, last, account = np.broadcast_arrays(
        np.asarray(codes), np.asarray(pp), np.asarray(vpp), np.asarray(rank),
        np.asarray(first), np.asarray(last), np.asarray(account))
    kinds = ("dense", "moe", "mtp")
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

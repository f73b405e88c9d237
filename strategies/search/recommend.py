"""Which plan to recommend, and why, in words. Pure.

Among the plans within a tolerance of the fastest, the simplest wins: fewer parallel
dimensions, then no interleaving, then a lower ZeRO stage, then no cross-node tensor
parallelism, then speed (``complexity``). ``explain`` says what the recommendation gives up
against the fastest plan, and what dropping each dimension it keeps would cost.

>>> from strategies.plan import Plan
>>> complexity(Plan(tp=8, pp=8, dp=16, schedule="interleaved", vpp=3, zero=1), 8)
(3, 1, 1, 0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from strategies.placement import expert_sizes, groups
from strategies.plan import Plan

DIM_NAMES = {"tp": "tensor parallelism", "pp": "pipeline parallelism",
             "cp": "context parallelism", "ep": "expert parallelism",
             "dp": "data parallelism"}


def complexity(plan: Plan, gpus_per_node: int) -> tuple[int, int, int, int]:
    """``(parallel dimensions > 1 among tp, pp, cp, ep, dp; interleaved; ZeRO stage;
    tp across nodes)``: smaller is simpler, compared in this order."""
    dims = sum(1 for d in (plan.tp, plan.pp, plan.cp, plan.ep, plan.dp or 1) if d > 1)
    return (dims, int(plan.vpp > 1), plan.zero, int(plan.tp > gpus_per_node))


@dataclass(frozen=True)
class Without:
    """The best known plan without one dimension: ``seconds`` is its simulated time
    (``exact``) or a lower bound on every such plan; None when no feasible plan lacks it."""

    dim: str
    plan: Plan | None
    seconds: float | None
    exact: bool


def _pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):.1f}%"


def declined(pick: Plan, best: Plan, gpus_per_node: int) -> list[str]:
    """The complications of ``best`` that ``pick`` does without."""
    out = []
    extra = [d for d in ("tp", "pp", "cp", "ep", "dp")
             if getattr(best, d) > 1 and getattr(pick, d) == 1]
    if extra:
        out.append("the extra dimension" + ("s " if len(extra) > 1 else " ")
                   + ", ".join(f"{d} {getattr(best, d)}" for d in extra))
    if best.vpp > 1 and pick.vpp == 1:
        out.append(f"interleaving (vpp {best.vpp})")
    if best.zero > pick.zero:
        out.append(f"ZeRO-{best.zero} (ZeRO-{pick.zero} suffices)")
    if best.tp > gpus_per_node >= pick.tp:
        out.append("tensor parallelism across nodes")
    return out


def explain(pick: Plan, pick_s: float, best: Plan, best_s: float, tolerance: float,
            gpus_per_node: int, without: list[Without]) -> list[str]:
    """Sentences: why ``pick`` over the fastest ``best``, and why each dimension it keeps."""
    why = []
    if pick == best:
        why.append(f"it is the fastest plan ({pick_s:.3f} s per step) and no plan within "
                   f"{100 * tolerance:g}% of it is simpler")
    else:
        gave_up = declined(pick, best, gpus_per_node)
        simpler = (" (it does without " + " and ".join(gave_up) + ")") if gave_up else ""
        why.append(f"it is within {_pct(pick_s, best_s)} of the fastest plan ({best.short()}, "
                   f"{best_s:.3f} s) and simpler{simpler}: the fastest plan's extra complexity "
                   f"buys {_pct(pick_s, best_s)} ({pick_s - best_s:.3f} s per step), inside "
                   f"the {100 * tolerance:g}% tolerance")
    for w in without:
        name = f"{DIM_NAMES[w.dim]} ({w.dim} {getattr(pick, w.dim)})"
        if w.seconds is None:
            why.append(f"{name} is needed: no feasible plan does without it")
        elif w.seconds < pick_s:
            why.append(f"{name}: a plan without it could be up to {_pct(pick_s, w.seconds)} "
                       f"faster (bound {w.seconds:.3f} s) but none is simpler")
        elif w.exact:
            why.append(f"{name}: the best plan without it ({w.plan.short()}) is "
                       f"{_pct(w.seconds, pick_s)} slower ({w.seconds:.3f} s)")
        else:
            why.append(f"{name}: every plan without it is at least {_pct(w.seconds, pick_s)} "
                       f"slower (lower bound {w.seconds:.3f} s)")
    return why


def batching_sentences(plan: Plan, fixed: Mapping[str, Any]) -> list[str]:
    """Sentences for the pipeline flushes and the micro-batch group the space chose for
    ``plan`` (``fitting.fewest_flushes``, ``fitting.least_group``; none where ``--fix`` gave
    them or they are the defaults)."""
    out = []
    m = plan.gbs // (plan.mbs * plan.dp)
    if plan.flushes > 1 and "flushes" not in fixed:
        out.append(f"pipeline flushes (flushes {plan.flushes}): the fewest (a power of two) "
                   f"with which this plan fits in memory, {m // plan.flushes} of its {m} "
                   "micro-batches per pipeline held at once; each flush pays its own fill and "
                   "drain, so fewer would be faster but do not fit")
    g = plan.microbatch_group_size
    if g is not None and "microbatch_group_size" not in fixed:
        out.append(f"micro-batch group (microbatch_group_size {g}): {m // plan.flushes} "
                   f"micro-batches per flush are not a multiple of pp={plan.pp}, so the "
                   f"default group (pp) cannot run them; {g} is the least group the "
                   "interleaved schedule accepts")
    return out


def expert_choice(plan: Plan, gpus_per_node: int, num_experts: int) -> dict:
    """The expert-parallel choice of a resolved plan of a mixture of experts: ``ep``, ``etp``
    and the expert-data-parallel copies ``edp`` (``placement.expert_sizes``), the experts each
    rank holds, and where the expert all-to-all runs: the most nodes any expert-parallel group
    spans (``placement.groups(plan, "ep")``, node of rank ``r`` is ``r // gpus_per_node``):
    1 is within a node (NVLink), more is across nodes (the scale-out network)."""
    etp, ep, edp = expert_sizes(plan)
    nodes = max(len({r // gpus_per_node for r in g}) for g in groups(plan, "ep")) \
        if ep > 1 else 1
    return {"ep": ep, "etp": etp, "edp": edp, "experts_per_rank": num_experts // ep,
            "a2a_nodes": nodes,
            "a2a": "none" if ep == 1 else "within a node" if nodes == 1 else "across nodes"}


def expert_sentence(c: dict) -> str:
    """``expert_choice`` in words (the recommendation's ``why``)."""
    split = ("each expert whole on its rank (etp 1)" if c["etp"] == 1 else
             f"each expert split over etp {c['etp']} ranks")
    if c["ep"] == 1:
        return (f"expert parallelism: none (ep 1): every rank holds all "
                f"{c['experts_per_rank']} experts, {split}, so no expert all-to-all")
    where = ("within a node (NVLink)" if c["a2a"] == "within a node" else
             f"across nodes (each expert-parallel group spans {c['a2a_nodes']} nodes)")
    return (f"expert parallelism: ep {c['ep']}, {c['experts_per_rank']} experts per rank, "
            f"{split}, {c['edp']} expert-data-parallel cop{'y' if c['edp'] == 1 else 'ies'}; "
            f"the expert all-to-all runs "
            f"{where}")


#: the K/V exchanges in words (plan ``cp_comm``; None: the stack's own, by its ``cp_impl``)
EXCHANGE_WORDS = {"p2p": "the ring of K/V sends under the attention",
                  "ring": "the ring of K/V sends under the attention",
                  "all_gather": "K/V all-gathered before the attention",
                  "allgather": "K/V all-gathered before the attention",
                  "a2a": "Q, K, V and O all-to-all'd over the {cp} CP ranks",
                  "a2a+p2p": "the all-to-all over {k} ranks, then the ring over {r} groups",
                  "torch": "PyTorch's ring"}


def exchange_sentence(pick: Plan, pick_s: float, other: Without | None, own: str,
                      why: str | None = None) -> str:
    """The K/V exchange of ``pick`` (``cp > 1``) in words, against ``other``, the best known
    plan with another exchange (``Without`` with ``dim`` ``cp_comm``; None: the space
    explores no other one); ``own``: the stack's ``cp_impl``, the exchange of a plan that
    names none; ``why``: why the stack's own cannot run the model
    (``stacks.cp_windows.own_exchange_refusal``), where that chose the exchange."""
    name = pick.cp_comm or own
    k = pick.hierarchical_cp or 1
    what = EXCHANGE_WORDS.get(name, name).format(cp=pick.cp, k=k, r=pick.cp // k)
    head = (f"K/V exchange (cp_comm {pick.cp_comm}" + (f", hierarchical_cp {k}"
                                                       if pick.hierarchical_cp else "")
            if pick.cp_comm else f"K/V exchange (the stack's own, {own}") + f": {what})"
    if why:
        head += f", chosen because {why}"
    if other is None:
        return head
    if other.seconds is None:
        return f"{head}: no feasible plan with context parallelism runs another exchange"
    if other.seconds < pick_s:
        return (f"{head}: a plan with another exchange could be up to "
                f"{_pct(pick_s, other.seconds)} faster (bound {other.seconds:.3f} s) but none "
                "is simpler")
    if other.exact:
        return (f"{head}: the best plan with another exchange ({other.plan.short()}) is "
                f"{_pct(other.seconds, pick_s)} slower ({other.seconds:.3f} s)")
    return (f"{head}: every plan with another exchange is at least "
            f"{_pct(other.seconds, pick_s)} slower (lower bound {other.seconds:.3f} s)")

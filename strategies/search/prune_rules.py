"""The rules that prune the plan space, in the order they are applied (``RULES``), as masks
over the columns: ``row_rules`` (up to the batch rule), ``framework_ok`` (the named stack),
``schedule_ok`` (the schedule's own rules and the flushes') and ``pipeline_bubble`` (the
closed-form bubble the ``bubble`` rule bounds); the memory rule and ZeRO-2's dominance are
``space.enumerate_space``'s."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies.cost.cp_a2a import heads_ok
from strategies.cost.mamba_mixer import mamba_plan_ok, tp_divides_mixer
from strategies.cost.recompute import modules_mask
from strategies.flushes import flush_rules
from strategies.framework import DEFAULT as DEFAULT_FRAMEWORK
from strategies.job import expert_plan_ok
from strategies.model import ModelSpec
from strategies.model.dsv4 import plan_modelled
from strategies.plan.checks import expert_shard_whole
from strategies.plan.choices import CP_COMMS
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays, rank_layers
from strategies.schedules import DEFAULT_SCHEDULE, dispatch, schedule_code, schedule_of_code
from strategies.schedules.validity import all_ok
from strategies.search.options import SpaceOptions
from strategies.search.plan_rows import LAYOUT_KEYS, SWITCH_KEYS
from strategies.stacks.cp_windows import window_exchange_ok
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.rules import ep_overlap_rules, param_gather_optimizer_rules, stack_mask
from topologies.cluster import Cluster
from topologies.cluster.nvlink_domain import fits_nvlink_domain

#: (reason key, what it means), in the order the rules are applied.
RULES: tuple[tuple[str, str], ...] = (
    ("fixed", "differs from a dimension fixed with --fix"),
    ("tp_heads", "tp does not divide the attention heads or the KV heads"),
    ("pp_layers", "pp does not divide the layers"),
    ("cp_seq", "2*cp does not divide the sequence length (or the model has Mamba-2 layers, "
               "whose context parallelism and op-level recomputation are not modelled, or "
               "DeepSeek-V4's compressed attention, whose context parallelism and unfused "
               "path are not; with cp_comm=a2a, cp does not divide the rank's query or KV "
               "heads; or a windowed model over an exchange the stack runs no window over, "
               "stacks.cp_windows)"),
    ("ep", "ep needs an MoE model and must divide the experts; etp must divide the expert "
           "width and etp*ep the tp*cp*dp ranks of a stage; ep_overlap's own rules"),
    ("tp_cross_node", "tp spans NVLink domains (allow with --allow-cross-node-tp)"),
    ("sp_seq", "sequence parallelism needs tp*cp to divide the sequence length"),
    ("zero3_pp", "ZeRO-3 is not combined with pipeline parallelism"),
    ("framework", "the named software stack (--framework) cannot run it"),
    ("redundant", "same as a simpler plan (SP with tp=1, ZeRO with no data parallelism, "
                  "a schedule with pp=1), or dominated by it (selective recompute of core "
                  "attention alone with FlashAttention: the fused kernel keeps no score "
                  "matrix, so it saves no memory, and its rerun makes the step slower)"),
    ("batch", "global batch is not a multiple of mbs*dp"),
    ("schedule", "pp*vpp does not divide the layers, or the schedule's own rules refuse the "
                 "plan (interleaving: pp>=2 and a multiple of pp micro-batches)"),
    ("bubble", "the schedule's closed-form pipeline bubble (pp-1)/(vpp*m) above the maximum"),
    ("memory", "peak memory above the limit"),
    ("zero2_dominated", "ZeRO-2 where the same plan with ZeRO-1 fits and the estimate ranks it "
                        "at least as fast (ZeRO-2 reduce-scatters every micro-batch's "
                        "gradients, ZeRO-1 once per step; ZeRO-2 wins where those hide under "
                        "the step's backwards, its passes stream a gradient shard, or its "
                        "memory spares recomputation)"),
)


def tp_divides_heads(model: ModelSpec, tp):
    """The ``tp_heads`` rule: ``tp`` divides the attention heads and the KV heads (and a
    hybrid model's Mamba-2 heads and groups, ``mamba_mixer.tp_divides_mixer``). Vectorised."""
    ok = (model.num_attention_heads % tp == 0) & (model.kv_heads % tp == 0)
    return ok & tp_divides_mixer(model, tp) if model.is_hybrid else ok


def fixed_mask(c: dict[str, np.ndarray], fixed: Mapping[str, Any],
               num_layers: int | None = None) -> np.ndarray:
    """The rows whose columns hold the values ``fixed`` gives (``--fix``, a ``--plan``'s
    keys); ``num_layers``: the model's, for a fixed ``recompute_layers`` (at most the layers
    of the row's largest chunk, ``job``'s rule)."""
    ok = np.ones(len(c["tp"]), dtype=bool)
    if any(k in fixed for k in LAYOUT_KEYS):    # a saved uneven layout: the rows holding it,
        # the fields it leaves out at their even values (``layouts.candidate_columns``)
        ok &= (c["lf"] == int(fixed.get("first_stage_layers") or 0)) \
            & (c["ll"] == int(fixed.get("last_stage_layers") or 0)) \
            & (c["acc"] == bool(fixed.get("account_embedding", False)))
    if fixed.get("param_gather_with_optimizer"):    # the rows Megatron-LM runs it on, whatever
        # stack is named (``make_job``; the stack's own rule: ``framework_ok``)
        for _, _, rule_ok, _ in param_gather_optimizer_rules(DEFAULT_FRAMEWORK,
                                                             PlanArrays.from_columns(c)):
            ok &= np.broadcast_to(rule_ok, ok.shape)
    for k, v in fixed.items():
        if k in SWITCH_KEYS or k in LAYOUT_KEYS or k == "recompute_method":
            continue    # carried by every row (``product._switches``), or read above/below
        if k == "recompute_layers":     # the full rows carry it (``product._grid``)
            first, mid, last, _, _ = rank_layers(int(num_layers or 0),
                                                 PlanArrays.from_columns(c))
            most = np.ceil(np.maximum(np.maximum(first, mid), last) / c["vpp"])
            ok &= (c["rc"] == RECOMPUTE_CODE["full"]) & (most >= int(v))
            continue
        if k == "recompute_modules":      # the modules of a selective plan (``product._grid``)
            ok &= c["rc"] == RECOMPUTE_CODE["selective"]
        elif k == "flushes":              # carried by every row (``product._grid``)
            continue
        elif k == "microbatch_group_size":    # a schedule that takes a group (``product._grid``)
            ok &= c["mgs"] == int(v)
        elif k == "dp_shard":     # the rows ``Plan`` takes it on (``plan.checks.check_dp_shard``)
            flat = c["dp"] == int(v)
            ok &= (c["dp"] % int(v) == 0) & (flat | (
                (c["zero"] >= 1) & (int(v) * c["cp"] >= 2)
                & ((c["ep"] == 1) | expert_shard_whole(c["tp"], c["cp"], int(v), c["ep"],
                                                       c["etp"]))))
        elif k == "schedule":
            ok &= c["sched"] == schedule_code(v)
        elif k == "recompute":
            ok &= c["rc"] == RECOMPUTE_CODE[v]
        elif k == "hierarchical_cp":      # a2a+p2p's size (``product._with_exchanges``: cpk)
            ok &= c.get("cpk", np.ones_like(c["cp"])) == int(v)
        else:
            ok &= c[k] == (bool(v) if k == "sp" else int(v))
    return ok


def framework_ok(c: dict[str, np.ndarray], fw: FrameworkProfile | None) -> np.ndarray:
    """What stack ``fw`` can run: ``strategies.stacks.rules.stack_mask``, the rule list
    ``plan_violations`` reads for one plan; every plan when no stack is named. A pipelined
    row of a generic schedule the stack runs as its own (``FrameworkProfile.schedule_impl``:
    Megatron-DeepSpeed's ``1f1b`` is DeepSpeed's engine) is refused too where the space
    holds that schedule itself (``--schedules all``): the two are one plan
    (``stack_schedules``)."""
    ok = stack_mask(fw, c)
    for generic, impl in (fw.schedule_impl if fw is not None else ()):
        if (c["sched"] == schedule_code(impl)).any():
            ok = ok & ~((c["pp"] > 1) & (c["sched"] == schedule_code(generic)))
    return ok


def stack_schedules(c: dict[str, np.ndarray], fw: FrameworkProfile | None) -> np.ndarray:
    """The schedule column as stack ``fw`` runs it: each pipelined row's generic schedule
    the stack implements its own way replaced by that schedule (``FrameworkProfile.
    schedule_for``, as ``make_job`` replaces a plan's), so the later rules, the memory, the
    estimate, the bound, the keys and the simulations of the search all read the schedule
    the stack runs (Megatron-DeepSpeed: ``deepspeed-1f1b``, whose lock step and kept stage
    outputs 1F1B's costs and memory leave out)."""
    sched = c["sched"]
    for generic, impl in (fw.schedule_impl if fw is not None else ()):
        sched = np.where((c["pp"] > 1) & (sched == schedule_code(generic)),
                         schedule_code(impl), sched)
    return sched


def row_rules(model: ModelSpec, cluster: Cluster, opts: SpaceOptions,
              framework: FrameworkProfile | None = None):
    """``(reason, columns -> ok-mask)`` in ``RULES`` order, up to the batch rule;
    ``framework``: the named stack (None: the default's rules, as ``make_job``)."""
    s, L, G = model.seq_length, model.num_layers, cluster.nvlink_domain_size

    def ep_ok(c):
        ok = expert_plan_ok(model, c["tp"], c["cp"], c["dp"], c["ep"], c["etp"])
        if "epo" in c or "dw" in c:     # the combined 1F1B's own limits, whatever stack runs
            # it (make_job)
            P = PlanArrays.from_columns(c)
            for _, _, rule_ok, _ in ep_overlap_rules(DEFAULT_FRAMEWORK, P):
                ok = ok & np.broadcast_to(rule_ok, ok.shape)
        return ok

    def cross(c):
        tp = c["tp"]
        return fits_nvlink_domain(cluster, tp) | (opts.allow_cross_node_tp & (tp % G == 0))

    default = schedule_code(DEFAULT_SCHEDULE)

    core = modules_mask(("core_attn",))

    def mamba_ok(c):          # the rule mamba_mixer.check_hybrid_plan raises
        return mamba_plan_ok(model, c["cp"], c["rc"] == RECOMPUTE_CODE["op"])

    def dsv4_ok(c):           # the rule model.dsv4.refuse_cost raises
        return plan_modelled(model, c["cp"], c["flash"])

    stack = framework if framework is not None else DEFAULT_FRAMEWORK

    def window_ok(c):         # the rule stacks.cp_windows.check_window_exchange raises
        return window_exchange_ok(model, stack, c["cp"], c["cpc"] if "cpc" in c else 0)

    def a2a_ok(c):            # the rules cost.cp_a2a.check_heads and Plan raise
        if "cpc" not in c:
            return True
        # a2a: cp divides the rank's heads; a2a+p2p: its size k does, 1 < k < cp dividing cp
        # (``plan.spec.check_hierarchical_cp``; ``job.check_plan_against_model``)
        k = c["cpk"] if "cpk" in c else np.ones_like(c["cp"])
        hier = (k > 1) & (k < c["cp"]) & (c["cp"] % k == 0) & heads_ok(model, c["tp"], k)
        return np.where(c["cpc"] == 1 + CP_COMMS.index("a2a"), heads_ok(model, c["tp"], c["cp"]),
                        np.where(c["cpc"] == 1 + CP_COMMS.index("a2a+p2p"), hier, True))

    # a selective plan the user asked for (``--fix recompute=selective`` or its modules) is
    # not pruned as redundant: the answer is that plan, not an empty search
    asked_selective = opts.fixed.get("recompute") == "selective" \
        or "recompute_modules" in opts.fixed

    def redundant(c):
        # selective recompute of core_attn alone (the default modules) with FlashAttention
        scores_only = (c["rcm"] == 0) | (c["rcm"] == core) if "rcm" in c else True
        ok = ~(c["sp"] & (c["tp"] == 1)) & ~((c["zero"] > 0) & (c["dp"] * c["cp"] == 1)) \
            & ~((c["pp"] == 1) & (c["sched"] != default))
        return ok if asked_selective else ok & ~((c["rc"] == 1) & c["flash"] & scores_only)

    return (
        ("fixed", lambda c: fixed_mask(c, opts.fixed, L)),
        ("tp_heads", lambda c: tp_divides_heads(model, c["tp"])),
        ("pp_layers", lambda c: (L % c["pp"] == 0) | uneven_rows(c)),
        ("cp_seq", lambda c: ((c["cp"] == 1) | (s % (2 * c["cp"]) == 0)) & mamba_ok(c) & dsv4_ok(c)
                    & a2a_ok(c) & window_ok(c)),
        ("ep", ep_ok),
        ("tp_cross_node", cross),
        ("sp_seq", lambda c: ~c["sp"] | (s % (c["tp"] * c["cp"]) == 0)),
        ("zero3_pp", lambda c: (c["zero"] < 3) | (c["pp"] == 1)),
        ("redundant", redundant),
        ("batch", lambda c: c["gbs"] % (c["mbs"] * c["dp"]) == 0),
    )


def schedule_ok(c: dict[str, np.ndarray], L: int) -> np.ndarray:
    """pp*vpp divides the layers, the flushes divide the micro-batches (``flushes.
    flush_rules``, the rule ``make_job`` raises) and each plan's schedule accepts one flush's
    micro-batches (``Schedule.valid``; a named micro-batch group: the schedule's ``rules``
    with it, as ``make_job`` checks them)."""
    pp, v = c["pp"], c["vpp"]
    m = c["gbs"] // (c["mbs"] * c["dp"])
    k = c.get("fl", np.ones_like(pp))
    ok = ((L % (pp * v) == 0) | uneven_rows(c)) & all_ok(flush_rules(pp, m, k))
    m = m // np.maximum(k, 1)
    g = c.get("mgs", np.zeros_like(pp))
    valid = dispatch(c["sched"], "valid", pp, m, v) > 0
    for code in np.unique(c["sched"][g > 0]).tolist():
        sel = (g > 0) & (c["sched"] == code)
        valid[sel] = np.broadcast_to(all_ok(schedule_of_code(code).rules(
            pp[sel], m[sel], v[sel], g[sel])), (int(sel.sum()),))
    return ok & valid


def pipeline_bubble(c: dict[str, np.ndarray]) -> np.ndarray:
    """The schedule's closed-form bubble fraction of one pipeline flush (``bubble`` rule)."""
    m = c["gbs"] // (c["mbs"] * c["dp"] * c["fl"])
    return dispatch(c["sched"], "bubble_fraction", c["pp"], m, c["vpp"])


def uneven_rows(c: dict[str, np.ndarray]) -> np.ndarray:
    """Rows that carry an uneven layout (``strategies.search.layouts``)."""
    return (c["lf"] > 0) | (c["ll"] > 0) | c["acc"]

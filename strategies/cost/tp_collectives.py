"""A layer's tensor-parallel collectives beyond its plain pair per pass, each priced at what
the stack's code moves and where it runs: sequence parallelism's backward re-gathers beside the
data-gradient GEMMs (docs/calibration.md §5.70), the column-parallel data-gradient reductions
beside the weight-gradient GEMMs (§5.75), and multi-head latent attention's collectives at
its latents' widths, its rope key's own pair, its recomputed and column-parallel down
projections' gathers, the latter's reductions beside their weight gradients and its
once-per-step replicated-gradient all-reduce (§5.76, §5.81, §5.85, §5.99). Each rule reads a stage-cost record ``x`` (``stage.StageCosts`` or
``stage.StageCostArrays``: the fields named in each docstring) and a collective-time function
``t``; the estimate (scalar and arrays), the lower bound and the simulator's program builder
all call these. Seconds; bytes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from strategies.cost import comm as cm
from strategies.cost import token_counts
from topologies.cluster import Cluster


def per_width(t: Callable[[float], token_counts.Num]) -> Callable[[float], token_counts.Num]:
    """``t`` worked out once per width (the rules below ask for width 1 several times)."""
    seen: dict[float, token_counts.Num] = {}

    def once(width: float) -> token_counts.Num:
        if width not in seen:
            seen[width] = t(width)
        return seen[width]
    return once


def sp_regather_pieces(x: Any) -> tuple[tuple[Any, Any, Any], ...]:
    """``(share, width, seconds)`` of each sequence-parallel re-gather of one mean layer's
    backward (``x``: a ``StageCostArrays`` or ``StageCosts``): each re-gathers the saved
    shard of a column-parallel linear's input, ``width`` times the ``rg_bytes`` of the
    forward's hidden-width all-gather, beside the data-gradient GEMM of ``seconds`` it was
    issued before; the attention's once per layer per column linear (QKV: width 1; MLA's
    up projections: their latents' widths, ``layer_time.attention_column_widths``, §5.76), the
    dense MLP's and the shared experts' fc1 on their share of the layers, then MLA's
    column-parallel down projections (Megatron-Core core_v0.12-v0.13, ``TEColumnParallel
    Linear`` over the hidden state, ``attn_down_ops``): each re-gathers the hidden state,
    width 1, beside its own data-gradient GEMM (``layer_time.down_dgrad``), once per layer
    (docs/calibration.md §5.97). A piece of width 0 does not exist (no second attention
    column linear without MLA, no column-parallel down projection) and is left out."""
    out = ((x.rg_attn_n, x.attn_w, x.rg_attn), (x.rg_attn_n, x.attn_w2, x.rg_attn2),
           (x.rg_dense_n, 1.0, x.rg_dense), (x.rg_shared_n, 1.0, x.rg_shared),
           (1.0, x.rg_down_qw, x.rg_down_q), (1.0, x.rg_down_kvw, x.rg_down_kv))
    return tuple(p for p in out if p[1] > 0)


def sp_regather_exposed(t_ag: Callable[[float], token_counts.Num], x: Any) -> token_counts.Num:
    """Seconds per mean layer's backward the sequence-parallel re-gathers keep the compute
    stream waiting: each all-gather runs beside the data-gradient GEMM
    it was issued before (Megatron-Core ``LinearWithGradAccumulationAndAsyncCommunication.
    backward``: ``all_gather(async_op=True)``, ``grad_output.matmul(weight)``,
    ``handle.wait()``, then the weight gradient; Transformer Engine the same with
    ``gather_along_first_dim(async_op=True)``, or its userbuffers bulk overlap
    ``ub_bulk_dgrad`` under TP overlap), so it exposes ``max(0, t_ag(width) - dgrad)``,
    summed over ``sp_regather_pieces`` by share; ``t_ag(width)``: the seconds of the
    all-gather of ``width`` times ``rg_bytes`` (0 where ``rg_bytes`` is 0: no re-gather).
    The one rule the estimate and the lower bound read; the simulator compiles the same
    pieces (``simulator.program.builder``). docs/calibration.md §5.70, §5.76."""
    out, t = 0.0, per_width(t_ag)
    for share, width, dgrad in sp_regather_pieces(x):
        out = out + share * np.maximum(t(width) - dgrad, 0.0)
    return out


def dgrad_reduce_pieces(x: Any) -> tuple[tuple[Any, tuple[tuple[Any, Any], ...]], ...]:
    """``(share, ((width, seconds), ...))`` of each tensor-parallel collective of one mean
    layer's backward the column-parallel data-gradient reductions replace (``x``: a
    ``StageCostArrays`` or ``StageCosts``): the attention's (once per layer) and the dense
    MLP's and the shared experts' fc1 (on their share of the layers, ``sp_regather_pieces``'
    shares). Each of its linears reduces ``width`` times ``rd_bytes`` (the hidden-width
    collective the layer's TP term counts) beside its weight-gradient GEMM of ``seconds``:
    one linear of width 1 (QKV, fc1), or MLA's two up projections of their latents' widths
    (``layer_time.attention_column_widths``, §5.76)."""
    attn = tuple(p for p in ((x.attn_w, x.rd_attn), (x.attn_w2, x.rd_attn2)) if p[0] > 0)
    return ((x.rg_attn_n, attn), (x.rg_dense_n, ((1.0, x.rd_dense),)),
            (x.rg_shared_n, ((1.0, x.rd_shared),)))


def dgrad_reduce_time(x: Any, tp: token_counts.Num, sp: token_counts.Num, cl: Cluster,
                      width: float = 1.0) -> token_counts.Num:
    """Contention-free seconds of one column-parallel data gradient's reduction across
    ``tp``: a reduce-scatter of ``width`` times ``x.rd_bytes`` under SP (``sp``), an
    all-reduce without; 0 where ``rd_bytes`` is 0 (no asynchronous reduction)."""
    rd = x.rd_bytes * width
    t = np.where(sp, cm.collective_time("reduce_scatter", rd, tp, 1, cl),
                 cm.collective_time("allreduce", rd, tp, 1, cl))
    return np.where(np.asarray(rd) > 0, t, 0.0)


def dgrad_reduce_hidden(t_red: Callable[[float], token_counts.Num], x: Any) -> token_counts.Num:
    """Seconds per mean layer's backward of the tensor-parallel collectives the weight
    gradient hides: a column-parallel linear's backward computes its data gradient, starts
    its reduction (reduce-scatter under SP, all-reduce without) with ``async_op=True``,
    runs the weight-gradient GEMM and only then waits (Megatron-Core ``tensor_parallel/
    layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication.backward``; Transformer
    Engine ``linear.py``, ``layernorm_linear.py``, ``layernorm_mlp.py``), so of a reduction
    of ``t_red(width)`` seconds ``min(t_red(width), wgrad)`` is hidden, summed over
    ``dgrad_reduce_pieces`` by share; exposed ``max(0, t_red(width) - wgrad)``. Where a
    counted hidden-width collective (``t_red(1)``) is run as reductions of other widths
    (MLA's up projections, §5.76) the difference ``t_red(1) - sum t_red(width)`` is
    hidden too (it is not run), so the exposed remainder is the pieces' own. 0 where
    ``t_red`` is 0 (``rd_bytes`` 0: blocking). The one rule the estimate and the lower
    bound read; the simulator compiles the same pieces (``simulator.program.tensor_parallel``).
    docs/calibration.md §5.75, §5.76."""
    out, t_red = 0.0, per_width(t_red)
    for share, pieces in dgrad_reduce_pieces(x):
        hid, run = 0.0, 0.0
        for width, wgrad in pieces:
            t = t_red(width)
            hid, run = hid + np.minimum(t, wgrad), run + t
        # the counted collective less what the pieces run: 0 exactly for one of width 1
        out = out + share * (hid + (t_red(1.0) - run))
    return out


def tp_kind_bytes(x: Any, kind: str) -> token_counts.Num:
    """Bytes of one hidden-width tensor-parallel collective of ``kind`` (``x``: a
    ``StageCostArrays`` or ``StageCosts``): an all-gather ``tp_ag_bytes`` (the quantised
    norm output under SP in low precision), a reduce-scatter the rest of the pair's
    ``2·tp_bytes`` (bf16), an all-reduce ``tp_bytes``."""
    if kind == "allgather":
        return x.tp_ag_bytes
    if kind == "reduce_scatter":
        return 2 * x.tp_bytes - x.tp_ag_bytes
    return x.tp_bytes


def attn_tp_swap(x: Any, sp: bool, fwd: bool) -> tuple[str, tuple[float, ...]] | None:
    """The attention's column-side tensor-parallel collective of one pass that runs at other
    widths than the hidden one the layer's TP term counts: ``(kind, widths)``, or None where
    it runs at the hidden width or not at all. Megatron-Core's MLA (``transformer/
    multi_latent_attention.py``, NVIDIA/Megatron-LM d98e8a64 and core_v0.14-v0.17: the
    down projections ``TELinear`` with ``parallel_mode="duplicated"``, no tp group; the up
    projections column-parallel, ``gather_output=False``) feeds its column-parallel linears
    the latents, so under SP the forward all-gathers ``q_lora_rank`` and ``kv_lora_rank``
    elements per token (each up projection's own sequence-parallel gather, Transformer
    Engine ``linear.py``/``layernorm_linear.py``) instead of the hidden state, and the
    backward reduces their data gradients at the same widths (a reduce-scatter under SP,
    an all-reduce without, ``layer_time.attention_column_widths``). Without SP the forward's
    column side has no collective (``copy_to_tensor_model_parallel_region`` is the
    identity). The row side (``linear_proj``: the forward's reduce-scatter or all-reduce,
    the backward's all-gather) stays at the hidden width. The backward's asynchronous
    reductions (``dgrad_reduce_hidden``) already run at these widths; this is the
    blocking path's. docs/calibration.md §5.81."""
    widths = tuple(w for w in (x.attn_w, x.attn_w2) if w > 0)
    if widths == (1.0,) or (fwd and not sp):
        return None
    return ("allgather" if fwd else "reduce_scatter" if sp else "allreduce"), widths


def attn_tp_saved(t: Callable[[str, token_counts.Num], token_counts.Num], x: Any, sp: bool,
                  fwd: bool) -> token_counts.Num:
    """Seconds per mean layer and pass the attention's column-side collective takes less
    than the hidden-width one counted (``attn_tp_swap``): ``t(kind, B) - sum t(kind, w·B)``,
    ``B`` its hidden-width bytes (``tp_kind_bytes``), ``t(kind, nbytes)`` a collective's
    seconds; 0 (exactly) without a swap. The one rule the estimate and the lower bound read;
    the simulator compiles the same pieces (``simulator.program.tensor_parallel.tp_comm``)."""
    swap = attn_tp_swap(x, sp, fwd)
    if swap is None:
        return 0.0
    kind, widths = swap
    nb = tp_kind_bytes(x, kind)
    out = t(kind, nb)
    for w in widths:
        out = out - t(kind, w * nb)
    return out


def attn_rc_gathers(t: Callable[[str, token_counts.Num], token_counts.Num],
                    x: Any) -> token_counts.Num:
    """Seconds per mean layer's backward of the all-gathers MLA's recomputed up projections
    run again: Megatron-Core's ``mla_up_proj`` recomputation (``multi_latent_attention.py``
    ``recompute_up_proj``: ``CheckpointWithoutOutput`` over ``qkv_up_proj_and_rope_apply``,
    whose inputs are the latents' sequence shards under SP, core_v0.12 and core_v0.17) reruns
    each up projection's forward, its sequence-parallel all-gather included, before the
    attention's backward: ``tp_attn_rc`` times ``sum t("allgather", w·tp_ag_bytes)`` over the
    column linears' widths (``layer_time.attention_column_widths``). 0 where nothing is
    recomputed that way. The estimate reads it; the simulator compiles the same gathers
    after the recomputation (``ProgramBuilder.block``). docs/calibration.md §5.81."""
    out = 0.0
    for w in (x.attn_w, x.attn_w2):
        if w > 0:
            out = out + t("allgather", w * x.tp_ag_bytes)
    return x.tp_attn_rc * out


def attn_rope_time(t: Callable[[str, token_counts.Num], token_counts.Num], x: Any,
                   fwd: bool) -> token_counts.Num:
    """Seconds per mean layer and pass of MLA's rope key collective under SP: the
    down projection's rope part is the rank's sequence shard, gathered on its own
    (``multi_latent_attention.py`` ``gather_from_sequence_parallel_region(k_pos_emb)``,
    core_v0.17.1 line 640, core_v0.12.0 line 419: an all-gather forward, a reduce-scatter
    backward, both blocking Megatron mappings outside Transformer Engine's TP overlap) of
    ``qk_rope_head_dim`` bf16 elements per token: ``t(kind, tp_rope_w·B)``, ``B`` the
    hidden-width reduce-scatter's bf16 bytes. 0 without MLA, SP or tp. The estimate reads
    it; the simulator compiles the same collective closing each block
    (``ProgramBuilder._close_block``). docs/calibration.md §5.81."""
    nb = attn_rope_bytes(x)
    return np.where(np.asarray(nb) > 0, t("allgather" if fwd else "reduce_scatter", nb), 0.0)


def attn_rope_bytes(x: Any) -> token_counts.Num:
    """Bytes of MLA's rope key collective under SP (``attn_rope_time``): ``tp_rope_w``
    times the hidden-width bf16 reduce-scatter's; 0 where there is none."""
    return x.tp_rope_w * tp_kind_bytes(x, "reduce_scatter")


def attn_down_ops(x: Any, sp: bool, fwd: bool) -> tuple[tuple[str, token_counts.Num], ...]:
    """``(kind, bytes)`` of each tensor-parallel collective per mean layer and pass that
    MLA's column-parallel down projections add to what the layer's TP term, §5.81's latent
    widths (``attn_tp_swap``) and its rope key (``attn_rope_time``) count; () where the
    down projections are replicated (``tp_down`` 0: Megatron-Core core_v0.14 on). Megatron-
    Core core_v0.12.0-v0.13.1 (``transformer/multi_latent_attention.py``
    ``get_query_key_value_tensors``, core_v0.12.0 lines 374-421; ``models/gpt/
    gpt_layer_specs.py`` lines 117-123: ``TEColumnParallelLinear``) runs, per layer:

    * under SP, forward: each down projection all-gathers the hidden state's sequence
      shards itself (Transformer Engine's column-parallel input gather, ``tp_ag_bytes``:
      quantised in low precision like the QKV's); ``gather_from_tensor_model_parallel_
      region`` then all-gathers each output over tp (``q_lora_rank`` and ``kv_lora_rank +
      qk_rope_head_dim`` elements per token, bf16) before ``scatter_to_sequence_parallel_
      region`` re-splits the sequence (no collective). The rope key is cut from the gathered
      full-sequence output, so it has no gather of its own (``tp_rope_w`` 0);
    * under SP, backward: each down projection reduce-scatters its input gradient at the
      hidden width (bf16); each re-split's backward all-gathers the latent gradient
      (``q_lora_rank`` and ``kv_lora_rank``; the tp gather's backward is a split, no
      collective) and no rope reduce-scatter runs;
    * without SP: the forward's two tp gathers of the outputs; the backward's all-reduce of
      each down projection's input gradient at the hidden width.

    All are listed blocking. Where the stack reduces a column-parallel data gradient beside
    its weight-gradient GEMM (``rd_bytes`` > 0, ``FrameworkProfile.dgrad_overlap``) the
    backward's input-gradient reductions (the first one or two) run beside the down
    projections' weight gradients instead (``down_reduce_hidden``, §5.99); their backward
    re-gathers of the hidden state are ``sp_regather_pieces``' (§5.97). The one rule the
    estimate reads and the simulator compiles (``ProgramBuilder._close_block``);
    docs/calibration.md §5.85."""
    on = x.tp_down
    if not np.any(np.asarray(on) > 0):
        return ()
    bf = on * tp_kind_bytes(x, "reduce_scatter")        # bf16 hidden-width bytes
    n = 2 if x.down_q_w > 0 else 1
    outs = tuple(w for w in (x.down_q_w, x.down_kv_w) if w > 0)
    if fwd:
        gathers = tuple(("allgather", w * bf) for w in outs)
        return ((("allgather", on * x.tp_ag_bytes),) * n + gathers) if sp else gathers
    if sp:
        # the re-splits' backward gathers: the query latent and the kv latent (no rope;
        # ``attn_w2`` is ``kv_up``'s input width, ``kv_lora_rank/h``, with or without a
        # query down projection)
        lat = tuple(w for w in (x.down_q_w, x.attn_w2) if w > 0)
        return (("reduce_scatter", bf),) * n + tuple(("allgather", w * bf) for w in lat)
    return (("allreduce", on * x.tp_bytes),) * n


def down_reduce_pieces(x: Any) -> tuple[Any, ...]:
    """The weight-gradient GEMM seconds (``rd_down_q``, ``rd_down_kv``) of each of MLA's
    column-parallel down projections (``rg_down_qw``/``rg_down_kvw`` 1: the query one where a
    query latent exists, the kv one) beside which its input gradient's reduction runs, per
    mean layer (``x``: a ``StageCostArrays`` or ``StageCosts``); () with replicated down
    projections."""
    return tuple(w for on, w in ((x.rg_down_qw, x.rd_down_q), (x.rg_down_kvw, x.rd_down_kv))
                 if on > 0)


def down_reduce_hidden(t_red: Callable[[float], token_counts.Num], x: Any) -> token_counts.Num:
    """Seconds per mean layer's backward of the column-parallel down projections'
    input-gradient reductions (``attn_down_ops``' backward reduce-scatters under SP,
    all-reduces without: the hidden width, ``t_red(1)`` seconds each) that their
    weight-gradient GEMMs hide. Megatron-Core core_v0.12-v0.13 runs them as
    ``TEColumnParallelLinear`` (Transformer Engine ``module/linear.py`` ``_Linear.backward``:
    the data-gradient GEMM, its reduce-scatter, or all-reduce, started with
    ``async_op=True``, the weight-gradient GEMM, then the wait), as every column-parallel
    linear of §5.75, so each exposes ``max(0, t_red(1) - wgrad)`` and ``min(t_red(1),
    wgrad)`` is hidden, summed over ``down_reduce_pieces``, ``tp_down`` times (0 at tp 1).
    0 where ``t_red`` is 0 (``rd_bytes`` 0: TP overlap, a split backward, a blocking stack).
    The one rule the estimate and the lower bound subtract from ``attn_down_time``; the
    simulator compiles the same pieces (``ProgramBuilder.reduce_split``).
    docs/calibration.md §5.99."""
    pieces = down_reduce_pieces(x)
    if not pieces:
        return 0.0
    t, out = t_red(1.0), 0.0
    for wgrad in pieces:
        out = out + np.minimum(t, wgrad)
    return x.tp_down * out


def attn_down_time(t: Callable[[str, token_counts.Num], token_counts.Num], x: Any, sp: bool,
                   fwd: bool) -> token_counts.Num:
    """Seconds per mean layer and pass of ``attn_down_ops``: ``sum t(kind, bytes)``, 0
    where a collective has no bytes (replicated down projections, tp 1)."""
    out = 0.0
    for kind, nb in attn_down_ops(x, sp, fwd):
        out = out + np.where(np.asarray(nb) > 0, t(kind, np.where(np.asarray(nb) > 0, nb, 1.0)),
                             0.0)
    return out


def attn_full_rc_ops(x: Any, sp: bool) -> tuple[tuple[str, token_counts.Num], ...]:
    """``(kind, bytes)`` of the blocking collectives of MLA's attention forward that full
    recomputation reruns per recomputed layer, beyond the layer's hidden-width TP pair the
    recompute count already holds: the rope key's own all-gather under SP
    (``attn_rope_time``) and the column-parallel down projections' forward collectives
    (``attn_down_ops``). Megatron-Core's full recomputation (``tensor_parallel/random.py``
    ``CheckpointFunction``) reruns the whole layer's forward, these included. Per layer
    recomputed; ``tp_attn_full_rc`` says how many per mean layer. docs/calibration.md §5.85."""
    rope = attn_rope_bytes(x) if sp else 0.0
    ops = (("allgather", rope),) if np.any(np.asarray(rope) > 0) else ()
    return ops + attn_down_ops(x, sp, True)


def attn_full_rc_time(t: Callable[[str, token_counts.Num], token_counts.Num], x: Any,
                      sp: bool) -> token_counts.Num:
    """Seconds per mean layer's backward of ``attn_full_rc_ops``: ``tp_attn_full_rc`` times
    their sum (0 where a collective has no bytes)."""
    out = 0.0
    for kind, nb in attn_full_rc_ops(x, sp):
        out = out + np.where(np.asarray(nb) > 0, t(kind, np.where(np.asarray(nb) > 0, nb, 1.0)),
                             0.0)
    return x.tp_attn_full_rc * out


def sp_grad_allreduce_bytes(x: Any, layers: token_counts.Num) -> token_counts.Num:
    """Bytes of the once-per-step tensor-parallel all-reduce of the sequence-parallel-marked
    gradients of ``layers`` MLA layers (``tp_rep_grad_bytes`` each). Under SP a rank's
    replicated down projections and latent norms see only its sequence shard, so Megatron-
    Core marks them ``sequence_parallel`` (``extensions/transformer_engine.py`` ``TELinear``
    ``parallel_mode="duplicated"``, core_v0.14.0 line 378) and ``finalize_model_grads``
    sums them over tp in one coalesced all-reduce after the data-parallel gradient sync
    (``_allreduce_non_tensor_model_parallel_grads``, core_v0.14.0 lines 298-372, called at
    line 440), blocking, before the optimizer step; with column-parallel down projections
    (core 0.12-0.13) only the latent norms. The other layer norms' (every model's under SP)
    are not counted. docs/calibration.md §5.85."""
    return layers * x.tp_rep_grad_bytes

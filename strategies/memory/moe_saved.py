"""The routed experts' saved tensors as Megatron-Core's token dispatcher runs them (the
permuted tokens, the hottest rank's load, Transformer Engine's quantised copies), the eager
activation clamp's saved inputs, what recomputation leaves of them (``routed_stash_correction``)
and the token permutation's transient buffers."""
from __future__ import annotations

import numpy as np

from strategies.cost import token_counts
from strategies.cost.recompute import part_selected
from strategies.model import ModelSpec


def routed_token_saved_bytes(model: ModelSpec, expert_input: float | None = None,
                             width: int | None = None) -> tuple[float, float, float]:
    """``(fc1 input, activation-function input, fc2 input)``: bytes one routed token copy
    (one of its ``k`` experts) saves for the backward in the expert MLP, before any split.
    ``expert_input`` None: the module table's 16-bit ``2h``, ``4·F_e`` gated (``2·F_e``
    otherwise) and ``2·F_e``. Otherwise the GEMM inputs at ``expert_input`` bytes per
    element (``expert_input_bytes``: the one quantised copy Transformer Engine keeps)
    and the activation function's input in bf16 (Megatron-Core's ``WeightedSwiGLUFunction``
    input, the fused kernel's ``c_tensor``): ``q·h``, ``4·F_e``, ``q·F_e``. The routing
    probabilities both paths save (4 B per copy) and the unfused path's ``Fp8Padding`` rows
    (each local expert padded to a multiple of 32 rows) are neglected, as in the table.
    ``width``: the copy's width for ``h`` (a latent MoE's ``expert_hidden``; None: ``h``,
    the table's)."""
    h, f = width or model.hidden_size, model.expert_ffn
    act = (4 if model.gated else 2) * f
    if expert_input is None:
        return 2.0 * h, float(act), 2.0 * f
    return expert_input * h, float(act), expert_input * f


def routed_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                            sp=False, etp=None, load=1.0, cache=None, expert_input=None,
                            parts=(1.0, 1.0, 1.0), latent_proj=True) -> tuple:
    """``(as the table counts them, as they run)``: bytes per GPU and micro-batch of the mean
    layer's routed-expert tensors (numbers or numpy arrays). The table above counts the MoE
    layer's ``k`` token copies like a dense MLP's: the fc1 input ``2sbh·k`` split by ``t``
    only with SP, the activation-function and fc2 inputs ``(4 or 2 + 2)·sb·k·f_e`` split by
    ``t``. As Megatron-Core's token dispatcher runs them, the fc1 input is the permuted
    tokens the dispatch (and the expert tensor-parallel all-gather) delivered:
    ``2sbh·k·etp/t`` on every GPU, SP or not; and the hottest expert-parallel rank holds
    ``load`` (``token_counts.moe_load``) times the mean of all three. Only the MoE layers' share.
    The difference of the two is what ``memory.arrays`` adds to the table's stash. ``cache``:
    GEMM inputs cached in low precision (``cache_ratios``: the dispatched tokens, the MoE's
    SwiGLU input and fc2's input all at ``cache`` bytes per element). ``expert_input``: as
    they run, each routed copy saves ``routed_token_saved_bytes(model, expert_input)``
    (``expert_input_bytes``). ``parts``: a weight (1 or 0) for each of the three tensors
    (fc1 input, activation input, fc2 input): ``routed_stash_correction`` reads fc2's
    alone. A latent MoE (``strategies.model.latent``): as they run the copies are
    ``expert_hidden`` = ``L`` wide (the table's ``h``), and ``fc2_latent_proj`` saves its
    ``L``-wide input, ``2sb·L`` (split by ``t`` with SP; weighted as fc1's input; left out
    with ``latent_proj`` False: the expert MLP's own tensors alone)."""
    if not model.is_moe:
        return 0.0, 0.0
    etp = tp if etp is None else etp
    T = seq_len * micro_batch_size / cp
    k = model.moe_router_topk
    share = model.num_moe_layers / model.num_layers
    seq_div = np.where(sp, tp, 1.0) if np.ndim(sp) or np.ndim(tp) else (tp if sp else 1)
    r = 1.0 if cache is None else cache / 2.0

    def saved(x1, act, x2):          # the copies' bytes: fc1's input, then the MLP's inner
        return (T * k * x1 * parts[0],
                T * k * (act * parts[1] + x2 * parts[2]) / tp)

    fc1, inner = saved(*routed_token_saved_bytes(model))
    table = r * share * (fc1 / seq_div + inner)
    he = model.expert_hidden
    fc1, inner = saved(*routed_token_saved_bytes(model, expert_input, he))
    latent = r * share * 2.0 * T * (model.moe_latent_size or 0) * parts[0] / seq_div \
        * float(latent_proj)
    if expert_input is not None:
        r = 1.0
    real = r * share * load * (fc1 * etp / tp + inner) + latent
    return table, real


def clamp_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                           load=1.0):
    """Bytes per GPU and micro-batch that the eager activation clamp
    (``elementwise_bytes.clamp_bytes``: Megatron-Core's ``weighted_bias_quick_geglu_impl`` clamps
    the fc1 output's two halves before its fused quick-GEGLU) saves beyond the table:
    autograd's ``clamp_backward`` keeps each clamp's input, the fc1 output again, ``2·F_e``
    elements of 2 B per routed row: ``4·T·k·F_e/t`` (``T = s·b/cp``), on the MoE layers'
    share, at the hottest rank's ``load``; 0 without ``activation_clamp`` (numbers or numpy
    arrays)."""
    if model.activation_clamp is None or not model.is_moe:
        return 0.0 * np.asarray(load, dtype=float)
    T = seq_len * micro_batch_size / cp
    share = model.num_moe_layers / model.num_layers
    return share * load * 4 * T * model.moe_router_topk * model.expert_ffn / tp


def routed_stash_correction(model: ModelSpec, seq_len: int, micro_batch_size, tp, cp, sp,
                            etp, load, rc, modules, clamp=False, cache=None,
                            expert_input=None) -> tuple:
    """``(stashed, unrecomputed)``: what one layer's stash holds beyond the table for the
    routed experts (``routed_activation_bytes``: as they run minus as the table counts them),
    under recomputation ``rc`` (``RECOMPUTE_CODE``) with the selective ``modules`` mask, and
    with none. Nothing where the layer is recomputed whole (full, op) or the ``moe`` module
    redoes the routed MLP; ``moe_act`` leaves all but fc2's input (Megatron-Core's
    output-discarding checkpoint frees the activation's output, fc2's saved input, at every
    ``load``; under fp8 fc2 saves that original input, ``set_save_original_input``).
    ``clamp``: the stack runs gpt-oss's eager clamp (``framework.
    runs_eager_clamp``), whose saved inputs (``clamp_activation_bytes``) the stash also holds
    unless the layer is recomputed whole or ``moe_act``/``moe`` reruns the activation (its
    output-discarding checkpoint runs the clamp without saving). ``expert_input``: the
    routed GEMMs' saved inputs' bytes per element (``expert_input_bytes``). The memory
    arrays and ``job_layer_activation_bytes`` read this one rule."""
    args = (model, seq_len, micro_batch_size, tp, cp, sp, etp, load, cache, expert_input)
    table, real = routed_activation_bytes(*args)
    extra = real - table
    fc2_table, fc2_real = routed_activation_bytes(*args, parts=(0.0, 0.0, 1.0))
    rc = np.asarray(rc)
    whole = (rc == 2) | (rc == 3)
    dropped = whole | part_selected(rc, modules, "routed_mlp")
    act_dropped = part_selected(rc, modules, "routed_act")
    stashed = np.where(act_dropped, extra - (fc2_real - fc2_table), extra)
    cl = np.where(clamp, clamp_activation_bytes(model, seq_len, micro_batch_size, tp, cp,
                                                load), 0.0)
    cl_dropped = dropped | act_dropped
    return (np.where(dropped, 0.0, stashed) + np.where(cl_dropped, 0.0, cl))[()], extra + cl


def permutation_buffer_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, cp=1,
                             load=1.0, dispatch_bytes=token_counts.ACT_BYTES):
    """Transient bytes per GPU of one MoE layer's token permutation (numbers or arrays): the
    dispatch's send buffer of the GPU's ``s·b/(t·c)`` tokens permuted into ``k`` copies at
    ``dispatch_bytes`` per element (``moe_bytes.dispatch_element_bytes``: 2, or a stack's FP8
    dispatch with its scales) and the combine's receive buffer of as many (the hottest
    rank's: ``load`` times) at ``2`` bytes, alive while the layer runs (not stashed):
    ``2·T·h·k·(dispatch_bytes/2 + load)``. 0 for a dense model."""
    if not model.is_moe:
        return 0.0
    T = seq_len * micro_batch_size / (tp * cp)
    return 2.0 * T * model.expert_hidden * model.moe_router_topk \
        * (dispatch_bytes / token_counts.ACT_BYTES + load)

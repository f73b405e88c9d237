"""HBM bytes and kernel counts of a MoE layer's token path on one GPU: the routed token copies,
the element size a dispatch moves, the token permutations of Megatron-Core's dispatchers, the
quantisation padding and the per-expert output bias, and the dispatcher's device-to-host
synchronisations. Units: bytes, kernels; vectorised over the plan fields."""
from __future__ import annotations

import numpy as np

from strategies.cost.token_counts import ACT_BYTES, Num, tokens_per_gpu
from strategies.model import ModelSpec
from topologies.precision import get_precision


def routed_token_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0) -> Num:
    """Bytes of the routed token copies one GPU sends into one MoE layer's dispatch (and
    receives back in its combine), per micro-batch, in 16 bits: its ``T/tp`` tokens (sequence
    parallel, as Megatron-Core runs MoE under tensor parallelism), each a vector of the
    experts' width ``expert_hidden`` (``h``; a latent MoE's ``L``: Megatron-Core
    ``token_dispatcher.py`` L1535) for each of its ``topk`` experts, ``load`` times the
    mean for the hottest rank (``moe_load``). A dispatch in a low format moves
    ``dispatch_bytes/ACT_BYTES`` of it (``dispatch_element_bytes``)."""
    return ACT_BYTES * tokens_per_gpu(b, m.seq_length, cp) / tp * m.expert_hidden \
        * m.moe_router_topk * load


def dispatch_element_bytes(fp8_dispatch: bool, dtype: str) -> float:
    """Bytes per element of the tokens an expert-parallel dispatch moves: the precision's
    operand bytes (one row-wise copy with its scales: ``1 + 4/128`` for fp8-blockwise, one
    fp32 scale per 128 channels of a token) where the stack dispatches in its low format
    (``FrameworkProfile.fp8_dispatch``) and ``dtype`` is quantised; else ``ACT_BYTES``.
    The combine, and the combine-direction all-to-all of the backward, stay 16-bit; the
    backward's dispatch-direction all-to-all (the output gradients sent to the experts) is
    quantised like the forward's dispatch. Sources: DeepSeek-V3 (arXiv 2412.19437 §3.3.3
    "Low-Precision Communication": the activations before the MoE up-projections quantised
    to FP8 and then dispatched, the same for the activation gradients before the MoE
    down-projections, both combines kept in BF16); DeepEP's ``Buffer.dispatch`` takes
    ``(x: [tokens, hidden] float8_e4m3fn, scales: [tokens, hidden // 128] float)``
    (deepseek-ai/DeepEP ``deep_ep/buffer.py`` at ebfe47e). The one rule the all-to-all's
    bytes (``ep_alltoall_bytes_fwd``), the permutations' HBM bytes (``moe_permute_bytes``)
    and the memory model's send buffer (``activations.permutation_buffer_bytes``) read."""
    if not fp8_dispatch:
        return float(ACT_BYTES)
    p = get_precision(dtype)
    return float(p.operand_bytes) if p.quantised else float(ACT_BYTES)


#: Device-to-host synchronisations one MoE layer's forward makes in Megatron-Core's dropless
#: token dispatchers (``megatron/core/transformer/moe/token_dispatcher.py``): the alltoall
#: dispatcher copies the tokens-per-expert counts to the host for the all-to-all's split sizes
#: (``cuda_sync_point`` "before_ep_alltoall", or "before_finish" without EP), DeepEP's normal
#: dispatch waits on the host for the received counts, and HybridEP without a static token
#: budget reads ``tokens_per_expert.sum()`` to size the combine. The backward reuses the saved
#: split sizes: no synchronisation.
MOE_SYNCS_FWD = 1
#: Python-level operators the host runs between that synchronisation and the next kernel it
#: launches, by ``plan.DISPATCHERS`` code (Megatron-Core 0.17, ``core_v0.17.0``): the GPU's
#: queue is empty, so it waits for them. ``alltoall``: ``d2h_event.synchronize()`` returns in
#: Python and the next launch is the ``all_to_all`` autograd operator's (``token_dispatch``,
#: ``token_dispatcher.py`` L668-676): one operator's host path. ``deepep`` and ``hybridep``
#: wait inside their C++ dispatch (DeepEP's ``Buffer.dispatch`` polls the received counts;
#: HybridEP's ``dispatch_with_permute`` waits for its pinned-memory counts, ``fused_a2a.py``
#: L365-384) and allocate and launch the dispatch from there: no Python operator, the launch
#: gap only. Their ``tokens_per_expert`` arrive as host tensors (``torch.tensor`` of DeepEP's
#: list, HybridEP's pinned copy), so the experts' ``tolist()`` and DeepEP's ``.sum().item()``
#: do not synchronise again.
MOE_SYNC_HOST_OPS = (1, 0, 0)
#: Device-to-host synchronisations per call of Megatron-Core's clamped quick-GEGLU, the routed
#: activation gpt-oss's bridge selects (``fusions/fused_bias_geglu.py``
#: ``weighted_bias_quick_geglu_impl`` L434 at core_v0.15.0 to core_v0.18.0:
#: ``torch.tensor(linear_offset, dtype=input.dtype, device=input.device)``): a tensor built from
#: a Python float on the device is a pageable host-to-device copy that PyTorch completes with
#: ``cudaStreamSynchronize`` (``memcpy_and_sync``; pytorch/pytorch issues #120996 and #190217:
#: ``torch.tensor(3.14, device="cuda")`` "called a synchronizing CUDA operation"). Once per MoE
#: layer forward, and again in each rerun of the activation (selective ``moe_act``, full
#: recomputation). Transformer Engine's fused grouped MLP does not call it.
GEGLU_SYNCS = 1
#: Python-level operators the host runs between that synchronisation and its next launch:
#: ``WeightedQuickGeGLUFunction.apply`` (or its bias twin), whose compiled
#: ``weighted_quick_geglu`` is the next kernel (L435-441): one operator's host path.
GEGLU_SYNC_HOST_OPS = 1


def count_exchange(pad: Num) -> Num:
    """1 where the token dispatcher learns the tokens per expert at run time, 0 where the plan
    pads every expert to its capacity (``Plan.moe_pad_to_capacity``, drop-and-pad): the one
    rule for the count exchange and the device-to-host synchronisation. Megatron-Core's
    ``MoEAlltoAllTokenDispatcher.preprocess`` (``token_dispatcher.py``, ``core_v0.10.0`` to
    ``core_v0.17.0``) returns early under ``drop_and_pad``: the counts are the capacity
    (``token_counts.expert_capacity``), built on the host with ``torch.full``, so it neither
    all-gathers them over ``tp_ep_group`` nor moves ``cuda_sync_point`` off ``"no_sync"``
    (``_maybe_dtoh_and_synchronize`` does nothing ``if not self.drop_and_pad`` fails);
    HybridEP's manager likewise sets ``num_permuted_tokens`` and ``tokens_per_expert`` on the
    host (``_HybridEPManager.setup_metadata``, 0.17) and reads no count back. Dropping without
    padding keeps both (its ``"before_permutation_1"`` sync). Vectorised."""
    return np.logical_not(np.asarray(pad, dtype=bool)).astype(float)[()]


def moe_permute_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, ep: Num, load: Num = 1.0,
                      dispatcher: Num = 0, dedup: Num = 1.0,
                      etp: Num | None = None,
                      dispatch_bytes: float = ACT_BYTES, pad: Num = False) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the token permutations of the mean
    layer's MoE part (its share of the layers), as Megatron-Core's token dispatchers run them
    (``megatron/core/transformer/moe/token_dispatcher.py``, ``moe_utils.permute``/``unpermute``).

    ``R0 = routed_token_bytes(load=1)``: the GPU's ``T/t`` tokens in ``k`` copies; ``R``: the
    routed copies its experts receive (``load`` times ``R0``). Under drop-and-pad (``pad``)
    the alltoall dispatcher's local permutation and unpermutation move the ``capacity·E``
    padded rows, ``R``, in place of ``R0`` (the unpermutation still writes ``R0/k``). A
    permutation gathers rows: it reads and writes each routed copy once. ``dispatcher``
    (``plan.DISPATCHERS`` code):

    * 0 ``alltoall``: permute the local tokens into ``k`` copies sorted by expert (read
      ``R0``, write ``R0``); with ``ep > 1`` and more than one local expert, sort the received
      chunks (all-gathered over the ``etp`` expert-TP ranks first, ``etp·R``; ``etp`` default
      ``tp``) by local expert after the dispatch and back before the combine
      (``sort_chunks_by_idxs``: ``2·etp·R`` each); unpermute (read ``R0``, write the ``T/t``
      tokens, ``R0/k``: the sum of each token's copies). The router probabilities multiply
      the experts' activation (``experts.py``, fused into the SwiGLU kernel), not a pass.
    * 1 ``deepep``, 2 ``hybridep`` (the flex dispatcher): the dispatch delivers each token
      once per destination rank (``dedup`` times ``R``, ``ep_dedup``'s byte scale); the
      receiver permutes them into per-expert copies (read ``dedup·R``, write ``R``;
      ``_DeepepManager`` calls ``permute``, HybridEP's ``dispatch_with_permute`` runs its own
      permute kernel unless ``moe_permute_fusion_into_hybridep``, off by default and in
      Megatron-Bridge's performance scripts) and unpermutes before the combine (read ``R``,
      write ``dedup·R``).

    ``dispatch_bytes`` (``dispatch_element_bytes``): the tokens between the permutation before
    the dispatch and the expert GEMM move at that width (``s = dispatch_bytes/ACT_BYTES`` of
    the 16-bit bytes: the local permute and the sort after the dispatch, the receiver's
    permute), the experts' outputs back to the combine at 16 bits. The backward of a
    permutation is the inverse permutation: the same bytes (its dispatch-direction gradients
    quantised as the forward's dispatch, DeepSeek-V3 §3.3.3). Vectorised."""
    if not m.is_moe:
        z = 0.0 * np.asarray(ep, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    k = m.moe_router_topk
    etp = tp if etp is None else etp
    R0 = routed_token_bytes(m, b, tp, cp, 1.0)
    R = R0 * load
    # drop-and-pad (``pad``): the local permutation lays out the ``capacity·E`` padded rows
    # (``moe_utils.permute(..., drop_and_pad=True)``, ``num_out_tokens``): the padded load
    Rp = np.where(pad, R, R0)
    code = np.asarray(dispatcher)
    sort = np.where((np.asarray(ep) > 1) & (m.num_experts / np.asarray(ep, dtype=float) > 1),
                    4 * R * etp, 0.0)
    q = dispatch_bytes / ACT_BYTES           # 1.0 in 16 bits: the same arithmetic
    a2a = 2 * Rp * q + Rp + R0 / k + sort * (q + 1) / 2
    deep = (dedup * R + R) * q + (R + dedup * R)
    fwd = np.where(code > 0, deep, a2a)
    return (share * fwd)[()], (share * fwd)[()]


#: 16-bit copies of the routed tokens that Megatron-Core's ``TEGroupedMLP`` makes in a quantised
#: precision to align each local expert's rows to the quantised GEMM (``experts.py``:
#: ``self.quantization_padding(permuted_local_hidden_states, tokens_per_expert)`` before fc1,
#: ``self.quantization_unpadding(output, actual_tokens_per_expert)`` after fc2; Transformer
#: Engine ``pytorch/module/fp8_padding.py``/``fp8_unpadding.py``: ``fused_multi_row_padding``
#: reads the tokens and writes them into the padded buffer, 32-row alignment for MXFP8, 16
#: otherwise). The copy is skipped only when every split is already aligned, which the
#: benchmarks' forced balancing (random router logits, ``moe_router_force_load_balancing``)
#: does not give, unless HybridEP has padded them in its dispatch (``DISPATCH_PADS``), and
#: unless the router pads instead (``moe_router_padding_for_quantization``,
#: off by default and in the Megatron-Bridge performance configs, e.g. the resolved
#: ``scripts/performance/dryrun_configs/qwen/qwen3_235b_a22b_pretrain_gb200_nvfp4_v1.yaml``).
#: Forward: pad the fc1 input and unpad the fc2 output, each read and written once (2 + 2
#: passes); backward: their inverses on the gradients (2 + 2). The padded rows themselves
#: (under 32 per expert) and the router probabilities' padding (one value per row) are not
#: counted.
EXPERT_PAD_PASSES = (4, 4)
#: Whether the token dispatcher already delivers each local expert's rows padded to the
#: quantised GEMM's alignment, by ``plan.DISPATCHERS`` code, so that ``TEGroupedMLP``'s
#: ``Fp8Padding``/``Fp8Unpadding`` copy nothing. HybridEP does in a quantised precision
#: (Megatron-Core 0.16-0.17 ``token_dispatcher.py`` ``_HybridEPManager.dispatch``: ``if
#: self.config.fp8 or self.config.fp4: self.pad_multiple =
#: get_align_size_for_quantization(self.config)``, passed to ``hybrid_ep_dispatch`` and
#: ``hybrid_ep_combine``; DeepEP's hybrid-ep ``csrc/hybrid_ep/extension/permute.cu`` at
#: 017a520, 13d8379 and a0d27f1, ``permute_processing_kernel``, lays each expert's rows out at a multiple of
#: ``pad_multiple`` and returns ``tokens_per_expert`` with the padded rows counted), so the
#: splits ``TEGroupedMLP`` passes are aligned and Transformer Engine returns the input
#: unchanged (v2.14 ``module/fp8_padding.py`` ``Fp8Padding.forward``: ``if m_splits ==
#: padded_m_splits: return inp, m_splits``; ``fp8_unpadding.py`` the same). Megatron-Core 0.18
#: states it as ``moe_utils.skip_routed_expert_padding``. The alltoall dispatcher and DeepEP
#: pad only under ``moe_router_padding_for_quantization`` (off in every reference row).
DISPATCH_PADS = (False, False, True)


def expert_pad_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0,
                     etp: Num | None = None) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's quantisation padding of
    the routed tokens (``EXPERT_PAD_PASSES`` 16-bit passes, half over the fc1 input
    ``T/t·k·h·load`` and half over the fc2 output, ``etp`` times that as in
    ``expert_bias_bytes``), on the MoE layers' share; the caller decides whether the stack
    pads (``FrameworkProfile.quant_padding``) and the precision is quantised. Vectorised."""
    if not m.is_moe:
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    etp = tp if etp is None else etp
    share = m.layer_shares().get("moe", 0.0)
    R = np.asarray(routed_token_bytes(m, b, tp, cp, load), dtype=float)
    rows = R * (1.0 + np.asarray(etp, dtype=float)) / 2.0   # mean of the input and output copies
    f, bw = EXPERT_PAD_PASSES
    return (share * f * rows)[()], (share * bw * rows)[()]


#: 16-bit passes over the routed experts' fc2 output that Megatron-Core 0.17's
#: ``TEGroupedMLP._apply_bias`` makes to add each local expert's output bias weighted by the
#: router probability, one expert at a time (``torch.split`` of the output, ``t + b * p`` per
#: expert, ``torch.cat``): forward, write ``b·p``, read ``t`` and ``b·p`` and write the sum,
#: read and write it again in the ``cat`` (6); backward, the gradients of ``b`` and ``p``
#: (``(g·p).sum(0)``, ``(g·b).sum(-1)``): each product read and written, then read by its
#: reduction (6), and the ``torch.split`` of the output's gradient back into one tensor
#: (autograd's ``split_with_sizes_backward`` is an ``at::cat`` of the per-expert gradients:
#: read and write, 2; the forward ``cat``'s backward is views): 8 (docs/calibration.md
#: §5.163). The fc1 bias rides Transformer Engine's grouped GEMM (cuBLASLt's ``BIAS``
#: epilogue forward, ``BGRADB`` in the weight-gradient GEMM in 16 bits, ``bgrad_quantize`` per
#: expert in a quantised recipe; ``module/grouped_linear.py`` v2.14 L207-218, L342-383): no
#: pass of its own.
EXPERT_BIAS_PASSES = (6, 8)
#: Kernels that per-expert bias path launches per local expert: forward ``b·p`` and the add
#: (plus one ``cat`` per layer), backward the two products and their two reductions (plus the
#: split's ``cat`` per layer).
EXPERT_BIAS_KERNELS = (2, 4)


def expert_bias_bytes(m: ModelSpec, b: Num, tp: Num, cp: Num, load: Num = 1.0,
                      etp: Num | None = None) -> tuple[Num, Num]:
    """HBM bytes ``(forward, backward)`` per GPU of the mean layer's routed-expert output
    bias (models whose experts have biases, gpt-oss; 0 otherwise): ``EXPERT_BIAS_PASSES``
    16-bit passes over the fc2 output the GPU's local experts produce, ``T/t·k·h`` rows
    times ``etp`` (the expert-TP ranks each hold the full hidden width of the partial
    outputs) times ``load``, on the MoE layers' share. Vectorised."""
    etp = tp if etp is None else etp
    if not (m.is_moe and m.bias):
        z = 0.0 * np.asarray(tp, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    out = np.asarray(routed_token_bytes(m, b, tp, cp, load) * etp, dtype=float)
    f, bw = EXPERT_BIAS_PASSES
    return (share * f * out)[()], (share * bw * out)[()]


def expert_bias_kernels(m: ModelSpec, ep: Num) -> tuple[Num, Num]:
    """Kernels ``(forward, backward)`` of the mean layer's per-expert bias path
    (``EXPERT_BIAS_KERNELS`` per local expert, ``E/ep``, and one ``cat`` each way: the
    forward's of the sums, the backward's of the split's gradients), 0 for experts without
    biases. Vectorised."""
    if not (m.is_moe and m.bias):
        z = 0.0 * np.asarray(ep, dtype=float)
        return z[()], z[()]
    share = m.layer_shares().get("moe", 0.0)
    local = m.num_experts / np.asarray(ep, dtype=float)
    f, bw = EXPERT_BIAS_KERNELS
    return (share * (f * local + 1))[()], (share * (bw * local + 1))[()]

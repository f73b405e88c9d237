"""A stack with one of its switches on, and the rule that says where it runs: torch.compile
(``compiled``), Transformer Engine's fused grouped MLP (``with_fused_grouped_mlp``), its MXFP8
fused attention (``with_fp8_attention``); ``runs_eager_clamp`` reads the result."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from strategies.errors import SpecError
from strategies.stacks.expert_gemm import TE_FUSED_GROUPED_MLP
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.pytorch import TORCHTITAN

if TYPE_CHECKING:
    from strategies.model import ModelSpec
    from topologies.gpus import GPU

#: the suffix of a stack's torch.compile variant (``compiled``): ``torchtitan-compile``, which
#: ``get_profile`` resolves (a variant of a stack, so not one of ``PROFILES``)
COMPILE_SUFFIX = "-compile"
#: kernels one compiled torchtitan block launches per forward: attention_norm, wq, wk, wv,
#: rotary q, rotary k with repeat_kv, repeat_kv v, SDPA, wo, add + ffn_norm, w1, w3,
#: silu * mul, w2, add (docs/calibration.md §5.69)
COMPILED_KERNELS_PER_LAYER = 15


#: torchtitan's loss under torch.compile (docs/calibration.md §5.74): since bbb1b616e
#: (2025-04-02) ``components/loss.py`` ``build_cross_entropy_loss`` wraps ``cross_entropy_loss``
#: (``F.cross_entropy(pred.flatten(0, 1).float(), labels)``) in ``torch.compile`` when the
#: model is compiled (e7c0cae, 2025-06; HEAD with ``"loss" in compile.components``). AOTAutograd's
#: min-cut partitioner (torch/_functorch/partitioners.py: ``aten.to``, ``sub``, ``exp``,
#: ``log`` recomputable, reductions' small outputs saved) keeps the 16-bit logits (2 bytes per
#: element) and the rows' max and log-sum-exp, not an fp32 copy; the fused backward writes the
#: gradient in the logits' dtype (2): 4 bytes per logit element at the peak. Memory only: the
#: time passes stay ``LossPasses``' assumption. Before bbb1b616e (9dec370, Dec 2024) the loss
#: ran eager ("TODO: compiling loss function causes CUDA errors"): ``TORCHTITAN.loss``'s 12.
TORCHTITAN_COMPILED_LOSS = replace(TORCHTITAN.loss, peak_bytes=4.0, peak_bytes_sharded=None,
                                   peak_sharded_source="", peak_source=(
    "torchtitan bbb1b616e+ (2025-04) components/loss.py build_cross_entropy_loss: "
    "torch.compile(cross_entropy_loss) with the model; the min-cut partitioner saves the "
    "16-bit logits (2) and row statistics, the fused backward writes the 16-bit gradient (2): "
    "4 bytes per element; with tp > 1 (loss_parallel's DTensor handlers traced) not read, "
    "taken as the same 4"))


def compiled(fw: FrameworkProfile) -> FrameworkProfile:
    """Stack ``fw`` with its model under torch.compile (torchtitan's ``--compile.enable``,
    ``components`` model and loss): the elementwise work of ``counts.
    compiled_elementwise_bytes_fwd`` in ``COMPILED_KERNELS_PER_LAYER`` kernels per layer;
    the quantisation casts keep ``quantise``'s rule (docs/calibration.md §5.69); the loss
    compiled with the model (``TORCHTITAN_COMPILED_LOSS``, its memory, §5.74). SpecError
    for a stack with no such switch."""
    if fw.name == TORCHTITAN.name:
        return replace(
            fw, name=fw.name + COMPILE_SUFFIX, elementwise_kernels="compiled",
            kernels_per_layer=COMPILED_KERNELS_PER_LAYER, loss=TORCHTITAN_COMPILED_LOSS,
            description="torchtitan with torch.compile (--compile.enable, model per "
                        "TransformerBlock): inductor-fused elementwise kernels, FSDP2, "
                        "torch.distributed.pipelining schedules")
    if fw.name.endswith(COMPILE_SUFFIX):
        return fw
    raise SpecError("framework", fw.name + COMPILE_SUFFIX,
                    f"torch.compile is a switch of torchtitan only (--compile.enable); "
                    f"{fw.name} has none")


def with_fused_grouped_mlp(fw: FrameworkProfile, dtype: str) -> FrameworkProfile:
    """Stack ``fw`` with its routed experts in Transformer Engine's fused grouped MLP
    (Megatron-Bridge's ``cutedsl_fused_grouped_mlp``: ``use_transformer_engine_op_fuser`` and
    ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``, ``scripts/performance/utils/overrides.py`` and
    ``perf_plugins.py`` at v0.5.0; Megatron-Core 0.18 ``TEGroupedMLP._fused_forward``; an
    MXFP8 path on compute capability 10, ``TE_FUSED_GROUPED_MLP``): the GLU kernel writes
    fc2's input quantised and the backward's dGLU fc1's ``dY``, so no cast passes of their
    own (``grouped_mlp_casts`` off; NVIDIA's "separate quantization pass", quantise's module
    doc); no ``Fp8Padding`` copies (``quant_padding`` off: HybridEP pads in its dispatch,
    Megatron-Core 0.18 ``moe_utils.skip_routed_expert_padding``, and the router pads
    otherwise under a full-iteration graph); one kernel per grouped GEMM; the activation's
    clamp inside the kernel (``runs_eager_clamp`` False); the op fuser also builds the dense
    MLPs as ``TEFusedMLP``, whose ``te.ops`` activation takes fc2's input quantizer
    (``next_op_input_quantizer``), so no dense cast passes either (``mlp_act_casts`` off,
    §5.118). As job precision ``dtype`` runs
    it: SpecError naming the field, value and rule for a precision other than MXFP8 (TE's
    fused op is its MXFP8 path) or a stack that does not run Megatron-Core's
    ``TEGroupedMLP`` (``grouped_mlp_casts``); the reference reader states the refusal."""
    if dtype != "mxfp8":
        raise SpecError("fused_grouped_mlp", dtype,
                        "Transformer Engine's fused grouped MLP is modelled under the MXFP8 "
                        "recipe only (its cuDNN grouped kernels); needs dtype mxfp8")
    if fw.fused_grouped_mlp:
        return fw
    if not fw.grouped_mlp_casts:
        raise SpecError("fused_grouped_mlp", fw.name,
                        "Transformer Engine's fused grouped MLP replaces Megatron-Core's "
                        "TEGroupedMLP; this stack does not run it")
    return replace(fw, grouped_mlp_casts=False, quant_padding=False,
                   expert_gemm_launch=TE_FUSED_GROUPED_MLP, fused_grouped_mlp=True,
                   mlp_act_casts=False)


def with_fp8_attention(fw: FrameworkProfile, dtype: str, gpu: "GPU") -> FrameworkProfile:
    """Stack ``fw`` with its attention core in Transformer Engine's FP8 fused attention
    (Megatron-Core's ``fp8_dot_product_attention``, TE's ``fp8_dpa``) as job precision
    ``dtype`` runs it on ``gpu``: only MXFP8 is modelled (TE 2.16 runs MXFP8 attention
    under the MXFP8 recipe, cuDNN's fused kernel on sm 100 with cuDNN >= 9.21, TE
    ``attention/dot_product_attention/utils.py`` ``get_attention_backend``), on the Blackwell
    chips the public cuDNN timings cover (``strategies.cost.fp8_attention.chip_class``);
    docs/calibration.md §5.98. SpecError naming the field, value and rule otherwise: a stack
    without Transformer Engine's attention (``grouped_mlp_casts``: Megatron-Core with TE)."""
    from strategies.cost.fp8_attention import chip_class
    if dtype != "mxfp8":
        raise SpecError("fp8_attention", dtype, "FP8 attention is modelled under the MXFP8 "
                        "recipe only (TE's MXFP8 fused attention); needs dtype mxfp8")
    if not (fw.grouped_mlp_casts or fw.fused_grouped_mlp):
        raise SpecError("fp8_attention", fw.name, "FP8 attention is Transformer Engine's "
                        "fp8_dpa under Megatron-Core; this stack does not run it")
    if chip_class(gpu) is None:
        raise SpecError("fp8_attention", gpu.name, "MXFP8 attention runs on sm 100 "
                        "(B200/GB200, B300/GB300) only, where the cuDNN timings are public")
    return replace(fw, fp8_attention=True)


def with_cp_comm(fw: FrameworkProfile, cp_comm: str | None) -> FrameworkProfile:
    """Stack ``fw`` running the context-parallel K/V exchange plan field ``cp_comm`` names
    (``strategies.plan.choices.CP_IMPL_OF``: ``p2p`` the ring, ``all_gather`` the exposed
    all-gather); ``fw`` itself for None. The stack rules (``rules.stack_rules``) refuse an
    exchange the stack does not run before this is read; docs/calibration.md §5.134."""
    from strategies.plan.choices import CP_IMPL_OF
    if cp_comm is None or fw.cp_impl == CP_IMPL_OF[cp_comm]:
        return fw
    return replace(fw, cp_impl=CP_IMPL_OF[cp_comm])


def runs_eager_clamp(fw: FrameworkProfile) -> bool:
    """Whether stack ``fw`` runs gpt-oss's activation clamp as eager kernels of its own
    (``eager_variants``, ``compute.eager_variant_time``, its stash in the memory model):
    not inside Transformer Engine's fused grouped MLP (``fused_grouped_mlp``)."""
    return bool(fw.eager_variants and not fw.fused_grouped_mlp)


def runs_gpt_oss_bridge(m: "ModelSpec", fw: FrameworkProfile) -> bool:
    """Whether stack ``fw`` runs ``m`` with the settings Megatron-Bridge's gpt-oss bridge
    gives Megatron-Core (v0.4.2 ``src/megatron/bridge/models/gpt_oss/gpt_oss_bridge.py``
    L63-88: ``add_bias_linear = True``, ``bias_dropout_fusion = False``, ``activation_func =
    quick_gelu`` with ``activation_func_clamp_value`` and ``glu_linear_offset = 1.0``,
    ``softmax_type = "learnable"``): a stack that runs Megatron-Core's model code
    (``eager_variants``) and a model with gpt-oss's fields, linear biases with the clamped
    gated activation and attention sinks (``hf_config.gpt_oss``; DeepSeek-V4's clamp and
    sinks come without linear biases). Read by ``moe_time.geglu_sync_time`` and
    ``elementwise_time.attn_bias_add_time`` (docs/calibration.md §5.163)."""
    return bool(fw.eager_variants and m.bias and m.attention_sinks
                and m.activation_clamp is not None)


TORCHTITAN_COMPILE = compiled(TORCHTITAN)


def arrays_stack(fw: FrameworkProfile, cp_comm: Any) -> FrameworkProfile:
    """Stack ``fw`` running the one context-parallel exchange the plans' ``PlanArrays.cp_comm``
    codes name (0: the stack's own, then 1 + the index in ``plan.choices.CP_COMMS``), as
    ``make_job`` runs each plan's (``with_cp_comm``, the one rule). The stage costs price one
    exchange per call: plans naming different ones are refused (field, the codes, the rule)."""
    from strategies.plan.choices import CP_COMMS
    codes = np.asarray(cp_comm, dtype=np.int64)
    if not codes.size:
        return with_cp_comm(fw, None)
    lo, hi = int(codes.min()), int(codes.max())   # O(n), no sort: this runs per scoring call
    if lo != hi:
        raise SpecError("cp_comm", np.unique(codes).tolist(), "the array estimate prices one "
                        "context-parallel exchange per call: price plans naming different "
                        "cp_comm apart")
    code = lo
    return with_cp_comm(fw, CP_COMMS[code - 1] if code else None)

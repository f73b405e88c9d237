"""The values a ``FrameworkProfile`` field may take, and the check of every field
(``check_profile``, run by the profile's ``__post_init__``): SpecError naming
``framework.<field>``, the value and the rule."""
from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from strategies.errors import SpecError
from strategies.plan import DISPATCHERS
from strategies.plan.choices import CP_COMMS, RECOMPUTE
from strategies.schedules import schedule_names
from strategies.stacks.expert_gemm import ExpertGemmLaunch
from topologies.limits import check_choice, check_choices
from topologies.precision import DTYPES

if TYPE_CHECKING:
    from strategies.stacks.profile import FrameworkProfile

#: the ways a plan gives an uneven pipeline layout (docs/layout.md): Megatron's layout string
#: (plan ``layout``), the first/last stage's layer counts (``first_stage_layers``,
#: ``last_stage_layers``), the embedding and the loss as layer slots (``account_embedding``,
#: ``account_loss``), any count per rank (``layers_per_stage``, docs/heterogeneous.md)
LAYOUT_WAYS = ("string", "first_last", "slots", "per_stage")
ZERO3_GATHERS = ("bucketed", "per-tensor")
#: ``FrameworkProfile.zero_buffers``: the default model's, DeepSpeed's ``DeepSpeedZeroOptimizer``
ZERO_BUFFERS = ("", "deepspeed", "deepspeed-halved")
#: ``FrameworkProfile.zero1_grad_reduce``: how ZeRO-1 reduces the gradients over dp
ZERO1_GRAD_REDUCES = ("reduce_scatter", "allreduce")
#: ``FrameworkProfile.dgrad_overlap``'s values
DGRAD_OVERLAPS = ("all", "sp", "none")
#: ``FrameworkProfile.mla_down_proj``'s values
MLA_DOWN_PROJS = ("replicated", "column")
#: ``FrameworkProfile.cp_impl``: Transformer Engine's p2p ring, its K/V all-gather (Megatron-Core
#: ``cp_comm_type="all_gather"``; Llama 3's CP), PyTorch's context_parallel, Transformer Engine's
#: QKV/O all-to-all (``cp_comm_type="a2a"``, DeepSpeed-Ulysses' head scatter), and both at two
#: levels (``"a2a+p2p"``: the all-to-all over the plan's ``hierarchical_cp`` consecutive CP
#: ranks, the ring across them; a plan naming no inner size runs it at 1, the ring)
CP_IMPLS = ("ring", "allgather", "torch", "a2a", "a2a+p2p")
#: ``FrameworkProfile.qkv_split``: no fused QKV split modelled, ``torch.split``, Megatron-Core's
#: with Transformer Engine (``strategies.cost.qkv_split``)
QKV_SPLITS = ("", "torch", "te")
#: the stacks' elementwise kernels (``FrameworkProfile.elementwise_kernels``)
ELEMENTWISE_KERNELS = ("fused", "eager", "compiled", "eager_te", "eager_flex")
#: ``FrameworkProfile.tp_overlap``: Transformer Engine's userbuffers, PyTorch's async TP
TP_OVERLAP_IMPLS = ("userbuffers", "async-tp")
#: ``FrameworkProfile.tp_overlap_without_sp``: TP overlap without SP refused, or turned off
TP_OVERLAP_WITHOUT_SP = ("refused", "disabled")
#: passes over a micro-batch's unsharded gradient of ``p`` elements that a sharded data-parallel
#: stack may run besides the reduce-scatter (``FrameworkProfile.sharded_grad_passes``), with
#: ``a`` the bytes of a 16-bit gradient element and ``g`` the reduce dtype's
#: (``SystemConfig.main_grad_bytes``); HBM bytes each (``compute.sharded_grad_pass_bytes``):
#: ``flat_grad_cat`` (FSDP1's FlatParameter: the per-weight gradients concatenated into the
#: flat gradient by the backward of the ``split`` that made the views: read a, write a),
#: ``reduce_cast`` (the 16-bit gradient cast to the reduce dtype: read a, write g; none when
#: g == a), ``predivide`` (``grad.div_(gradient_predivide_factor)`` before the reduce-scatter:
#: read g, write g), ``reduce_copy_in`` (FSDP2's ``foreach_reduce_scatter_copy_in``: every
#: gradient copied, and cast, into the reduce-scatter input: read a, write g)
SHARDED_GRAD_PASSES = ("flat_grad_cat", "reduce_cast", "predivide", "reduce_copy_in")
#: ``FrameworkProfile.unqualified_fp8``: the per-tensor fp8 recipes a plain "fp8" may mean
UNQUALIFIED_FP8 = ("fp8", "fp8-delayed", "fp8-current")
#: the plan switches a profile gives defaults for (``FrameworkProfile.default_*``)
DEFAULT_SWITCHES = ("flash_attn", "overlap_grad_reduce", "overlap_param_gather",
                    "tp_comm_overlap", "recompute")


#: (field, its allowed values) that ``check_profile`` checks in one loop
_CHOICES = (("tp_overlap", TP_OVERLAP_IMPLS), ("tp_overlap_without_sp", TP_OVERLAP_WITHOUT_SP),
            ("cp_impl", CP_IMPLS), ("elementwise_kernels", ELEMENTWISE_KERNELS),
            ("zero3_gather", ZERO3_GATHERS), ("dgrad_overlap", DGRAD_OVERLAPS),
            ("zero_buffers", ZERO_BUFFERS), ("zero1_grad_reduce", ZERO1_GRAD_REDUCES),
            ("mla_down_proj", MLA_DOWN_PROJS), ("qkv_split", QKV_SPLITS))


def check_profile(fw: "FrameworkProfile") -> None:
    """Refuse a profile field outside its values: SpecError naming ``framework.<field>``."""
    if not fw.name:
        raise SpecError("framework.name", fw.name, "must be a non-empty string")
    if not (isinstance(fw.kernels_per_layer, int) and fw.kernels_per_layer >= 0):
        raise SpecError("framework.kernels_per_layer", fw.kernels_per_layer,
                        "must be an integer >= 0")
    check_choice("framework.default_recompute", fw.default_recompute, RECOMPUTE)
    check_choices("framework.recompute", fw.recompute, RECOMPUTE)
    for name in ("alibi_score_bytes", "unfused_mask_bytes"):
        v = getattr(fw, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 100:
            raise SpecError(f"framework.{name}", v,
                            "must be bytes per score element in [0, 100)")
    if not (isinstance(fw.tp_loss_allreduces, tuple) and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1
            for n in fw.tp_loss_allreduces)):
        raise SpecError("framework.tp_loss_allreduces", fw.tp_loss_allreduces,
                        "must be a tuple of integers >= 1 (fp32 elements per token)")
    if fw.attention_kernel not in ("native", "fa2", "fa1"):
        raise SpecError("framework.attention_kernel", fw.attention_kernel,
                        "must be 'native', 'fa2' or 'fa1'")
    for name, choices in _CHOICES:      # the fields that take one of a fixed set of names
        check_choice(f"framework.{name}", getattr(fw, name), choices)
    if isinstance(fw.tp_overlap_bwd_exposed, bool) or \
            not isinstance(fw.tp_overlap_bwd_exposed, (int, float)) or \
            not 0 <= fw.tp_overlap_bwd_exposed <= 1:
        raise SpecError("framework.tp_overlap_bwd_exposed", fw.tp_overlap_bwd_exposed,
                        "must be a share in [0, 1]")
    if isinstance(fw.mamba_saved_d_inner, bool) or fw.mamba_saved_d_inner not in (1, 2, 3):
        raise SpecError("framework.mamba_saved_d_inner", fw.mamba_saved_d_inner,
                        "must be 1, 2 or 3 (d_inner-wide tensors a Mamba-2 mixer saves)")
    if fw.cp_kv_heads not in ("kv", "query"):
        raise SpecError("framework.cp_kv_heads", fw.cp_kv_heads,
                        "must be 'kv' or 'query'")
    if fw.default_recompute not in fw.recompute:
        raise SpecError("framework.default_recompute", fw.default_recompute,
                        f"must be one of the stack's recompute modes {fw.recompute}")
    for switch, _ in fw.default_sources:
        if switch not in DEFAULT_SWITCHES:
            raise SpecError("framework.default_sources", switch,
                            f"must name one of {', '.join(DEFAULT_SWITCHES)}")
    if not fw.zero3_reuse_params >= 0:
        raise SpecError("framework.zero3_reuse_params", fw.zero3_reuse_params,
                        "must be a number of parameters >= 0")
    if not isinstance(fw.sp_regather, bool):
        raise SpecError("framework.sp_regather", fw.sp_regather, "must be true or false")
    if fw.overlap_p2p_comm_warmup_flush and not fw.overlap_p2p_comm:
        raise SpecError("framework.overlap_p2p_comm_warmup_flush",
                        fw.overlap_p2p_comm_warmup_flush,
                        "needs overlap_p2p_comm (Megatron-Core's model_parallel_config)")
    if not isinstance(fw.grad_in_param_dtype, bool):
        raise SpecError("framework.grad_in_param_dtype", fw.grad_in_param_dtype,
                        "must be true or false")
    te = fw.te_version
    if te is not None and not (isinstance(te, tuple) and len(te) == 2 and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in te)):
        raise SpecError("framework.te_version", te,
                        "must be None or a (major, minor) tuple of integers >= 0")
    check_choices("framework.layouts", fw.layouts, LAYOUT_WAYS)
    if not 0 <= fw.launch_gap_s < 1e-3:
        raise SpecError("framework.launch_gap_s", fw.launch_gap_s,
                        "must be in [0, 1 ms) seconds")
    if not isinstance(fw.expert_gemm_launch, ExpertGemmLaunch):
        raise SpecError("framework.expert_gemm_launch", fw.expert_gemm_launch,
                        "must be an ExpertGemmLaunch (kind, streams)")
    check_choices("framework.sharded_grad_passes", fw.sharded_grad_passes, SHARDED_GRAD_PASSES)
    if len(set(fw.sharded_grad_passes)) != len(fw.sharded_grad_passes):
        raise SpecError("framework.sharded_grad_passes", fw.sharded_grad_passes,
                        "must name each pass at most once")
    check_choices("framework.precisions",
                  fw.precisions + tuple(d for d, _ in fw.precision_notes), DTYPES)
    if not fw.precisions:
        raise SpecError("framework.precisions", fw.precisions,
                        "must name at least one precision")
    check_choice("framework.unqualified_fp8", fw.unqualified_fp8, UNQUALIFIED_FP8)
    if fw.unqualified_fp8 != "fp8" and not fw.unqualified_fp8_source:
        raise SpecError("framework.unqualified_fp8_source", fw.unqualified_fp8_source,
                        "must name where the stack's default fp8 scaling is set")
    for field_name in ("optimizer_state_bytes", "master_bytes"):
        val = getattr(fw, field_name)
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float))
                                or not 0 < val < 100):
            raise SpecError(f"framework.{field_name}", val,
                            "must be bytes per parameter in (0, 100) or None")
    if (fw.master_bytes is not None and fw.optimizer_bytes_or(12.0) < fw.master_bytes):
        raise SpecError("framework.master_bytes", fw.master_bytes,
                        "must not exceed optimizer_state_bytes (the master is one of them)")
    if fw.master_only and (fw.fsdp2 or fw.master_bytes is not None):
        raise SpecError("framework.master_only", fw.master_only,
                        "must be False with fsdp2 or master_bytes (each states the "
                        "stored weight another way)")
    for name, _ in fw.sharded_grad_sources:
        if name not in fw.sharded_grad_passes:
            raise SpecError("framework.sharded_grad_sources", name,
                            "must name one of the profile's sharded_grad_passes "
                            f"({', '.join(fw.sharded_grad_passes) or 'none'})")
    for f in fields(fw):      # every switch is a bool (1, "yes" are not)
        if f.type == "bool" and not isinstance(getattr(fw, f.name), bool):
            raise SpecError(f"framework.{f.name}", getattr(fw, f.name),
                            "must be true or false")
    check_choices("framework.schedules", fw.schedules, schedule_names())
    check_choices("framework.moe_dispatchers", fw.moe_dispatchers, DISPATCHERS)
    check_choices("framework.cp_comms", fw.cp_comms, CP_COMMS)
    if fw.cp_comms and not fw.context_parallel:
        raise SpecError("framework.cp_comms", fw.cp_comms,
                        "a stack without context parallelism (context_parallel false) lets a "
                        "plan choose no K/V exchange: give ()")


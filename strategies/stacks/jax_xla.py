"""The JAX/XLA stack's profile (``JAX_XLA``: MaxText, PAXML)."""
from __future__ import annotations

from strategies.stacks.buckets import MODEL_BUCKET
from strategies.stacks.passes import StepPasses
from strategies.stacks.plan_defaults import StackFieldDefaults
from strategies.stacks.profile import LAUNCH_GAP_S, FrameworkProfile

JAX_XLA = FrameworkProfile(
    name="jax-xla", dp_bucket=MODEL_BUCKET,
    description="JAX/XLA (MaxText, PAXML): compiler-fused elementwise work, FSDP-style "
                "sharding, gradients accumulated by a separate fused add",
    grad_accum_fusion=False, kernels_per_layer=16, launch_gap_s=LAUNCH_GAP_S,
    default_flash_attn=True, default_overlap_grad_reduce=True,
    default_overlap_param_gather=True, default_tp_comm_overlap=False, default_recompute="full",
    schedules=("gpipe",), zero_stages=(0, 3), zero_with_pp=0, expert_parallel=True, ep_in_dp=True,
    hybrid_zero=(3,),        # MaxText's ici_fsdp x dcn_data_parallelism meshes
    microbatches_per_pp=True,
    # with pipelining the stack's rule (zero_with_pp 0) holds
    field_defaults=StackFieldDefaults(
        zero=3, zero_with_pp=0,
        zero_source="the fsdp mesh axis takes the devices: MaxText e591f30cb "
                    "src/maxtext/configs/base.yml:674 ici_fsdp_parallelism: -1",
        recompute="full",
        recompute_source="MaxText e591f30cb src/maxtext/configs/base.yml:358 "
                         "remat_policy: 'full'"),
    group_microbatches=False,
    # MaxText's context parallelism gathers K/V and reduce-scatters dK/dV (not a ring):
    # context_parallel_strategy "all_gather" (MaxText e591f30cb src/maxtext/configs/
    # base.yml:1201, types.py:1128) goes to Transformer Engine's DotProductAttention
    # (attention cudnn_flash_te: layers/attention_op.py:2321, :2337), whose
    # CPStrategy.ALL_GATHER (TE d0067d0 jax/cpp_extensions/attention.py:1797, :1915) gathers
    # K/V, reorders them, runs one kernel per local query chunk and reduce-scatters dK/dV:
    # strategies.cost.cp_allgather's rule (docs/calibration.md §5.195)
    cp_impl="allgather",
    # cudnn_flash_attention refuses windows under CP: a chunked window always
    # (attention_op.py:2259-2260), a sliding one unless packing with the load-balanced ring
    # (:2273-2274, :2297-2302), which is not modelled (docs/calibration.md §5.196)
    cp_window_impls=(("sliding", ()), ("chunked", ())),
    cp_sink_impls=None,   # not read: gpt-oss is refused by its windows above
    cp_chunk_source=None,   # cp_window_source says it for both kinds
    cp_chunk_fits=False,    # it raises on the attention type, whatever the length (L2259)
    cp_window_source=("MaxText's cudnn_flash_attention refuses windows under context "
                      "parallelism (a sliding one runs only with packing over the "
                      "load-balanced ring, not modelled)"),
    tp_comm_overlap=False, export="maxtext", layouts=(),
    sp_regather=False,   # XLA's SPMD partitioner decides what the backward keeps: not modelled
    dgrad_overlap="none",   # nor what it overlaps: not read
    recompute_modules=("core_attn", "layernorm", "mlp"), recompute_early_stop=True,
    recompute_flash_fwd=True, remat_named=True, weight_cast_per_forward=True,
    # weight_dtype float32: the fp32 weights are the only stored copy (docs/calibration.md §5.46)
    master_only=True,
    recompute_note="MaxText's remat policies are full, or named tensors saved and the rest "
                   "recomputed (strategies.remat_policies: selective with the modules "
                   "core_attn, layernorm, mlp)",
    precisions=("bf16", "fp16", "fp8", "fp8-delayed", "fp8-current", "mxfp8", "nvfp4"),
    precision_source="MaxText dtype bfloat16 or float16 (configs/base.yml) and quantization "
                     "te_fp8_delayedscaling, te_fp8_currentscaling, te_mxfp8, te_nvfp4 "
                     "(Transformer Engine recipes through JAX, layers/quantizations.py)",
    precision_notes=(("fp8-blockwise", "MaxText's quantization has no Transformer Engine "
                                       "blockwise (1x128/128x128) recipe"),
                     ("fp8-rowwise", "MaxText's quantization has no per-row recipe (torchao's "
                                     "rowwise is torchtitan's: --framework torchtitan)")),
    pipeline_split="MaxText's Pipeline vmaps one stage body over the stages: every stage builds "
                   "num_layers_per_pipeline_stage layers, the embedding and the head outside "
                   "the pipeline",
    default_sources=(
        ("flash_attn", "cuDNN fused attention through XLA (MaxText attention: "
                       "cudnn_flash_te in its GPU configs)"),
        ("overlap_grad_reduce", "XLA's latency-hiding scheduler overlaps the gradient "
                                "reduce-scatters with the backward"),
        ("overlap_param_gather", "XLA's latency-hiding scheduler overlaps the FSDP "
                                 "all-gathers with compute"),
        ("tp_comm_overlap", "no Transformer Engine userbuffers overlap"),
        ("recompute", "MaxText remat_policy: 'full' (configs/base.yml); Praxis "
                      "checkpoint_policy SAVE_NOTHING")),
    step=StepPasses(
        zero_grad=False, scale_grad=False, check_grad=False, param_copy=False,
        tied_reduce=False,
        sources=(
            ("zero_grad", "functional accumulation: no buffer to zero"),
            ("grad_norm", "optax.clip_by_global_norm (MaxText gradient_clipping_threshold); "
                          "the multiply is fused by XLA into the update"),
            ("param_copy", "fp32 weights cast inside the fused layers"))))

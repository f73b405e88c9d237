"""The cost model: the counts of one layer, one micro-batch, on one GPU (FLOPs, bytes,
parameters: ``token_counts``, ``gemm_shapes``, ``flop_counts``, ``attention_counts``,
``elementwise_bytes``, ``comm_bytes``, ``moe_bytes``, ``ep_dispatch``, ``param_counts``), the
kernel seconds (``gemm_kernel``, ``gemm_time``, ``attention_time``, ``elementwise_time``,
``grad_time``, ``moe_time``, ``overlap_clock``, ``embedding_head_time``, summed per layer by
``layer_time``), ``comm`` (contention-free collective seconds) and ``stage`` (the per-stage
record that the analytic estimate, the lower bound and the simulator all read)."""

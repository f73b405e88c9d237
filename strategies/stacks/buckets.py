"""A stack's data-parallel gradient bucket (``BucketRule``) and each stack's rule, read from its
code (docs/calibration.md §5.86, §5.92)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.system import MCORE_BUCKET_FLOOR, MCORE_BUCKET_PER_DP


@dataclass(frozen=True)
class BucketRule:
    """The stack's data-parallel gradient bucket: ``max(floor_params, per_dp_params x dp)``
    parameters (``SystemConfig.dp_bucket_params`` applies it; ``stack_system`` installs it;
    a job's ``SystemConfig.bucket_params`` > 0 overrides it). docs/calibration.md §5.86.

    >>> NEMO_BUCKET.floor_params == 128 * 1024 ** 2, MCORE_BUCKET.per_dp_params
    (True, 1000000.0)
    """

    floor_params: float
    per_dp_params: float = 0.0
    source: str = ""
    #: only pipeline rank 0's first model chunk is cut into buckets of that size; every
    #: other rank's and chunk's gradient is one bucket per buffer, reduced once its whole
    #: backward has ended (Megatron-Core DDP: ``bucket_size = None`` where ``pp_rank > 0``,
    #: ``training.get_model``'s ``disable_bucketing=(model_chunk_idx > 0)``; §5.92)
    first_chunk_only: bool = False

    def chunk_bucketed(self, pp_rank: int, chunk: int, mirrored: bool = False,
                       zero2: bool = False) -> bool:
        """Whether pipeline rank ``pp_rank``'s model chunk ``chunk`` is cut into buckets
        (else its gradient is one bucket). DualPipe's two copies (``mirrored``) and ZeRO-2's
        per-micro-batch reduce-scatters (``zero2``), neither of which Megatron-Core's DDP
        runs, keep their buckets.

        >>> MCORE_BUCKET.chunk_bucketed(0, 0), MCORE_BUCKET.chunk_bucketed(1, 0), \
MCORE_BUCKET.chunk_bucketed(0, 1), MODEL_BUCKET.chunk_bucketed(3, 1)
        (True, False, False, True)
        """
        return not self.first_chunk_only or mirrored or zero2 or (pp_rank == 0 and chunk == 0)

    def whole_share(self, pp: Any, v: Any, mirrored: Any, zero2: Any) -> Any:
        """Share of a non-first pipeline rank's parameters in its last-reduced bucket (arrays
        over plans): ``1/v`` (a chunk's, one bucket each) where that rank is not bucketed
        (``chunk_bucketed``; ``pp > 1``), else 0 (the size rule applies). Rank 0 keeps
        the size rule (its first chunk is the last one reduced)."""
        whole = self.first_chunk_only & (np.asarray(pp) > 1) & ~np.asarray(mirrored, bool) \
            & ~np.asarray(zero2, bool)
        return np.where(whole, 1.0 / np.maximum(np.asarray(v, float), 1.0), 0.0)


#: Megatron-Core DDP's default (``bucket_size`` None): ``max(40000000, 1000000 * dp)``,
#: megatron/core/distributed/distributed_data_parallel.py, unchanged core_r0.8.0-core_v0.17.0
MCORE_BUCKET = BucketRule(MCORE_BUCKET_FLOOR, MCORE_BUCKET_PER_DP,
                          "megatron/core/distributed/distributed_data_parallel.py: bucket_size = "
                          "max(40000000, 1000000 * get_data_parallel_world_size()); "
                          "bucket_size = None where pp_rank > 0 or disable_bucketing "
                          "(training.py get_model: model_chunk_idx > 0)",
                          first_chunk_only=True)
#: NeMo 2 (``MegatronCommOverlapCallback._get_optimizer_overlap_cfgs``, v2.0.0-v2.5) and
#: Megatron-Bridge (``training/comm_overlap.py``, the same method) set ``bucket_size = 128 *
#: 1024 * 1024`` whenever dp > 1 (at dp = 1 nothing is reduced)
NEMO_BUCKET = BucketRule(128.0 * 1024 ** 2, 0.0,
                         "nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py and "
                         "Megatron-Bridge training/comm_overlap.py: "
                         "comm_overlap_cfg.bucket_size = 128 * 1024 * 1024 if dp > 1; "
                         "Megatron-Core's DDP buckets pp rank 0's first chunk only",
                         first_chunk_only=True)
#: DeepSpeed ZeRO-1/2 ``reduce_bucket_size``, default 5e8 elements
#: (deepspeed/runtime/zero/config.py ``reduce_bucket_size: int = Field(pp_int(5e8), ge=0)``)
DEEPSPEED_BUCKET = BucketRule(5e8, 0.0, "deepspeed/runtime/zero/config.py: "
                                        "reduce_bucket_size default 5e8 elements")
#: stacks whose gradient bucketing the model does not take from their code (Megatron-LM 2021's
#: contiguous buffer, FSDP's per-module units, XLA's combiner, HAI-LLM's unpublished code):
#: the model's former single size, 40M parameters, kept so their figures do not move
MODEL_BUCKET = BucketRule(MCORE_BUCKET_FLOOR, 0.0,
                          "not from the stack's code: the model's 40M-parameter default")

"""What a hybrid model's Mamba-2 mixer keeps for its backward on a stack whose mixer differs
from Megatron-Core's, against the 16-bit tensor table (``layer_terms``' ``mamba_tp``, which
counts Megatron-Core's three ``d_inner`` tensors: ``mamba_mixer.SAVED_D_INNER``).

NeMo AutoModel (NVIDIA-NeMo/Automodel cb9765441, ``components/models/nemotron_v3/layers.py``
L394-408, no context parallelism) passes ``rmsnorm_weight`` and ``outproj_weight`` to
``mamba_split_conv1d_scan_combined``: ``MambaSplitConv1dScanCombinedFn.forward`` (mamba_ssm
v2.2.6 ``ssd_combined.py`` l.835-836) saves ``zxbcdt`` and ``out_x`` only, runs the gated norm
and ``out_proj`` inside and returns ``out_proj``'s output; its backward rebuilds the norm's
output for ``out_proj``'s weight gradient (``recompute_output``). One ``d_inner`` tensor, not
three (``FrameworkProfile.mamba_saved_d_inner``). With context parallelism (L348-388) AutoModel
calls the function without the norm and ``out_proj`` and runs them as modules (Megatron-Core's
three); a hybrid model's context parallelism is refused (``mamba_mixer.check_cp``), so that
path is not priced."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.mamba_mixer import SAVED_D_INNER
from strategies.cost.ssd_traffic import B16
from strategies.model import ModelSpec


def mixer_saved_delta(model: ModelSpec, seq_len: int, b: Any, tp: Any, rc: Any,
                      saved_d_inner: int | None) -> Any:
    """Bytes per GPU and micro-batch that one (mean) layer's stash holds beyond the 16-bit
    table where the stack's Mamba-2 mixer keeps ``saved_d_inner`` ``d_inner``-wide tensors
    (``FrameworkProfile.mamba_saved_d_inner``; negative below Megatron-Core's 3):
    ``mamba_share · 2 · s·b · (saved_d_inner − 3) · d_inner / tp``, split by ``tp`` as the
    table's ``mamba_tp``. 0 for a model without Mamba layers, ``saved_d_inner`` None or 3,
    and under full (``rc`` 2) or op (3) recomputation (nothing of the layer stashed). Numbers
    or numpy arrays."""
    if saved_d_inner is None or saved_d_inner == SAVED_D_INNER or not model.is_hybrid \
            or model.mamba_share == 0:
        return 0.0
    per_layer = (model.mamba_share * B16 * seq_len * np.asarray(b, dtype=float)
                 * (saved_d_inner - SAVED_D_INNER) * model.mamba_d_inner / np.asarray(tp))
    rc = np.asarray(rc)
    return np.where((rc == 2) | (rc == 3), 0.0, per_layer)[()]

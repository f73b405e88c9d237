"""What one layer keeps for the backward under each recomputation: none and Megatron's
selective modules (the tensor table less the selected parts, ``layer_activation_bytes``,
``selective_dropped_bytes``), a JAX remat policy's named tensors (``named_remat_bytes``),
torchtitan's op-level checkpointing (``op_saved_bytes``) and full recomputation (the layer
input). The table itself: ``strategies.memory.layer_terms``."""
from __future__ import annotations

from typing import Any

import numpy as np

from strategies.cost.gemm_shapes import op_sac_gemms
from strategies.cost.recompute import DEFAULT_MODULES, PARTS, has_module, modules_mask, \
    part_selected
from strategies.memory.layer_terms import TERM_KINDS, layer_activation_terms, part_bytes
from strategies.model import ModelSpec
from strategies.remat_policies import NEVER_READ, RECOMPUTED_WITH


def named_remat_terms(model: ModelSpec, seq_len: int, micro_batch_size: int
                      ) -> dict[str, tuple[float, str]]:
    """Bytes (before any parallel split) and split kind of each tensor a MaxText decoder layer
    tags with ``checkpoint_name`` (``strategies.remat_policies.NAMES``) and of its input, for
    one micro-batch: the layer input ``decoder_layer_input`` (the scan carry, ``2sbh``),
    ``query_proj`` (Q, ``2sbh``), ``key_proj`` and ``value_proj`` (``2·s·b·g·d`` each),
    ``out_proj`` (the output projection's output, ``2sbh``), ``context`` (the fused attention's
    output, ``2·s·b·a·d_v``; its log-sum-exp neglected as above), ``mlpwi_0``/``mlpwi_1`` (the
    gate and up projections' outputs, ``2sbf`` each; ``mlpwi`` the one of a plain MLP) and
    ``mlpwo`` (the down projection's output, ``2sbh``). ``qkv_proj``, the fused form of Q, K and
    V, is counted by the three (0 here). Source: AI-Hypercomputer/maxtext ``layers/llama2.py``,
    ``layers/attentions.py``, ``layers/linears.py`` at 2024-12-08 (docs/memory.md)."""
    terms = layer_activation_terms(model, seq_len, micro_batch_size)
    sb = seq_len * micro_batch_size
    sbh = sb * model.hidden_size
    fc = terms["activation_input"]                    # gated: both halves
    return {
        "decoder_layer_input": (terms["ln1_input"], "seq"),
        "query_proj": (terms["q"], "tp"),
        "key_proj": (2 * sb * model.kv_heads * model.head_dim, "tp"),
        "value_proj": (2 * sb * model.kv_heads * model.v_dim, "tp"),
        "qkv_proj": (0.0, "tp"),
        "out_proj": (2 * sbh, "seq"),
        "context": (terms["proj_input"], "tp"),
        "mlpwi": (0.0 if model.gated else fc, "tp"),
        "mlpwi_0": (fc / 2 if model.gated else 0.0, "tp"),
        "mlpwi_1": (fc / 2 if model.gated else 0.0, "tp"),
        "mlpwo": (2 * sbh * model.mean_expert_copies(), "seq"),
    }


def named_remat_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, mask):
    """Bytes one layer keeps per GPU and micro-batch under selective recomputation of the
    modules ``mask`` on a stack whose recomputation is a JAX remat policy
    (``FrameworkProfile.remat_named``; numbers or numpy arrays; ``mask`` 0: the default
    modules): its input and the named tensors the policy saves and the backward reads
    (``strategies.remat_policies.saved_names``: every name but ``context`` under ``core_attn``,
    the gate/up outputs under ``mlp`` and the never-read ``NEVER_READ``), split by ``tp`` as
    the stash is (``seq``: only with SP), ``/cp``. Nothing else: ``jax.checkpoint`` keeps no
    unnamed tensor (the norms' outputs, the activation's output, dropout masks, the scores)."""
    mask = np.where(np.asarray(mask) == 0, modules_mask(DEFAULT_MODULES), mask)
    seq_div = np.where(sp, tp, 1.0)
    total = 0.0
    for name, (nbytes, kind) in named_remat_terms(model, seq_len, 1).items():
        if name in NEVER_READ or not nbytes:
            continue
        x = nbytes / (seq_div if kind == "seq" else tp)
        if name in RECOMPUTED_WITH:
            x = np.where(has_module(mask, RECOMPUTED_WITH[name]), 0.0, x)
        total = total + x
    return b * total / cp


def selective_dropped_bytes(model: ModelSpec, seq_len: int, b, tp, sp, cp, rc, mask,
                            cache=None):
    """``(dropped, rebuilt)`` bytes per GPU and micro-batch of one layer under selective
    recomputation of the modules in ``mask`` (``rc`` 1; arrays): the selected parts other
    than the scores (which the stash drops by kind, ``layer_activation_bytes``), and the
    largest of them, rebuilt at once in the layer's backward (the parts are redone one
    after the other). ``cache``: as ``part_activation_terms``."""
    pb = part_bytes(model, seq_len, b, tp, sp, cp, cache)
    dropped, rebuilt = 0.0, 0.0
    for part in PARTS:
        if part == "scores":
            continue
        x = np.where(part_selected(rc, mask, part), pb[part], 0.0)
        dropped, rebuilt = dropped + x, np.maximum(rebuilt, x)
    return dropped, rebuilt


def layer_activation_bytes(model: ModelSpec, seq_len: int, micro_batch_size: int, tp: int = 1,
                           sp: bool = False, cp: int = 1, recompute: str = "none",
                           flash_attn: bool = True,
                           modules: tuple[str, ...] | None = None,
                           remat_named: bool = False, cache: float | None = None) -> float:
    """Bytes one transformer layer keeps for backward, per GPU and micro-batch.

    ``recompute="full"`` gives the stored layer input only (``checkpoint_input_bytes``); the layer's working set during
    its recomputation is ``layer_activation_bytes(..., recompute="none")``. ``remat_named``
    (``FrameworkProfile.remat_named``): selective recomputation keeps what the JAX remat
    policy saves (``named_remat_bytes``) instead of the table less the selected parts.
    ``cache``: GEMM inputs cached in low precision (``cache_ratios``; full and op
    recomputation keep their 16-bit forms).

    >>> from strategies.presets import model_preset
    >>> m = model_preset("gpt3-175b")
    >>> layer_activation_bytes(m, 2048, 1, tp=8, flash_attn=False) / (2048 * 12288)  # 10+24/8+10
    23.0
    >>> layer_activation_bytes(m, 2048, 1, tp=8, sp=True, recompute="selective") * 8 / (2048 * 12288)
    34.0
    """
    s, b = seq_len, micro_batch_size
    if recompute == "full":
        return float(checkpoint_input_bytes(model, s, b, tp, sp, cp))
    seq_div = tp if sp else 1
    if recompute == "op":
        return float(op_saved_bytes(model, s, b, tp, sp, cp))
    terms = layer_activation_terms(model, s, b, cache)
    rc = 1 if recompute == "selective" else 0
    mask = modules_mask(modules) if modules is not None else 0
    if rc and remat_named:
        return float(named_remat_bytes(model, s, b, tp, sp, cp, mask))
    total = 0.0
    for name, nbytes in terms.items():
        kind = TERM_KINDS[name]
        if kind == "score":
            if bool(part_selected(rc, mask, "scores")) or flash_attn:
                continue
            total += nbytes / tp
        elif kind == "tp":
            total += nbytes / tp
        else:
            total += nbytes / seq_div
    return total / cp - float(selective_dropped_bytes(model, s, b, tp, sp, cp, rc, mask,
                                                      cache)[0])


def op_saved_bytes(model: ModelSpec, seq_len: int, micro_batch_size, tp=1, sp=False, cp=1):
    """Bytes one layer keeps for backward under ``recompute=op`` (torchtitan's op-level
    selective checkpointing), per GPU and micro-batch; numbers or numpy arrays.

    What the policy saves (``MUST_SAVE``) plus the checkpoint's input
    (``checkpoint_input_bytes``), the output of every saved GEMM of ``costs.op_sac_gemms``
    (``2·M·N`` as the GEMM writes it on this GPU: a row-parallel GEMM's partial sum is ``h``
    wide), the attention kernel's output ``2·s·b·a·d_v/t`` (its log-sum-exp neglected, as
    above) and, with SP, the two reduce-scatter outputs ``2sbh/t`` each. All ``/c``."""
    s, b, h = seq_len, micro_batch_size, model.hidden_size
    T = b * s / cp
    gemms = sum(2.0 * c * M * N for c, M, N, _, _, saved in
                op_sac_gemms(model, b, tp, cp, 1) if saved)
    attn_out = 2.0 * T * model.num_attention_heads * model.v_dim / tp
    rs = np.where(np.logical_and(sp, tp > 1), 2 * 2.0 * T * h / tp, 0.0)
    return checkpoint_input_bytes(model, s, b, tp, sp, cp) + gemms + attn_out + rs


def checkpoint_input_bytes(model: ModelSpec, seq_len: int, micro_batch_size: Any,
                           tp: Any = 1, sp: Any = False, cp: Any = 1) -> Any:
    """Bytes of the input a checkpointed layer keeps, per GPU and micro-batch (full
    recomputation keeps it alone; ``recompute=op`` beside what its policy saves); numbers or
    numpy arrays: ``2·s·b·h·n`` (16-bit), ``/t`` with SP, ``/c``. ``n = hc_streams``: a
    DeepSeek-V4 layer's input is its hyper-connections' ``n`` residual streams (Megatron-Core
    ``transformer/hyper_connection.py``: the block passes ``n·h`` from layer to layer, as
    ``layer_terms``' ``ln1_input``/``ln2_input`` count it; docs/calibration.md §5.153); 1
    elsewhere."""
    seq_div = np.where(sp, tp, 1)
    return 2.0 * seq_len * micro_batch_size * model.hidden_size * model.hc_streams \
        / seq_div / cp

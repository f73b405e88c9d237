"""torchtitan's eager Llama block (no torch.compile): the memory-bound forward kernels as its
modules run them (``elementwise_bytes.eager_elementwise_bytes_fwd``, ``FrameworkProfile.
elementwise_kernels == "eager"``), against Megatron's fused kernels."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost import elementwise_bytes, param_counts
from strategies.cost.layer_time import layer_time
from strategies.errors import SpecError
from strategies.stacks.megatron import MEGATRON_CORE
from strategies.stacks.pytorch import PYTORCH_EAGER, TORCHTITAN
from strategies.presets import model_preset
from topologies.gpus import get_gpu

L8 = replace(model_preset("llama3-8b"), seq_length=8192)


def test_llama8b_bytes_per_token_closed_form():
    """Llama 3.1 8B (h 4096, 32 heads, 8 KV heads of 128, F 14336), tp 1, per token:
    two eager RMSNorms and two residual adds (2·36 + 2·6)·4096 = 344064, rotary embedding
    20·(32 + 8)·128 = 102400, repeat_kv 2·2·(8 + 32)·128 = 20480, SwiGLU 10·14336 = 143360:
    610304 bytes, against the fused kernels' 188416 (196608 with the two 1-byte dropout masks
    of a model trained with dropout; Llama is not)."""
    T = 8192
    assert elementwise_bytes.eager_elementwise_bytes_fwd(L8, 1, 1, 1, False) == 610304 * T
    assert elementwise_bytes.elementwise_bytes_fwd(L8, 1, 1, 1, False) == 188416 * T
    assert elementwise_bytes.elementwise_bytes_fwd(replace(L8, dropout=True), 1, 1, 1, False) \
        == 196608 * T
    assert elementwise_bytes.elementwise_bytes_fwd(L8, 1, 1, 1, False, "eager") == 610304 * T


def test_tensor_and_sequence_parallel_split():
    """The per-token norm and residual work is divided by t only with sequence parallelism;
    rotary, repeat_kv and the activation always are (heads and F are split)."""
    per_h, rest = 84 * 4096, 102400 + 20480 + 143360
    T = 8192
    assert elementwise_bytes.eager_elementwise_bytes_fwd(L8, 1, 8, 1, True) == pytest.approx(
        (per_h / 8 + rest / 8) * T, rel=1e-15)
    assert elementwise_bytes.eager_elementwise_bytes_fwd(L8, 1, 8, 1, False) == pytest.approx(
        (per_h + rest / 8) * T, rel=1e-15)
    # no GQA (a == g): no repeat_kv copy
    mha = replace(L8, num_query_groups=32)
    assert elementwise_bytes.eager_elementwise_bytes_fwd(mha, 1, 1, 1, False) == pytest.approx(
        (per_h + 20 * 64 * 128 + 143360) * T, rel=1e-15)


def test_profiles_and_layer_time():
    """torchtitan runs the eager kernels; Megatron-Core and Composer's pytorch-eager profile
    keep the fused count. The eager bytes lengthen torchtitan's layer by exactly their extra
    HBM time: forward once, backward twice, op recomputation once."""
    assert TORCHTITAN.elementwise_kernels == "eager"
    assert MEGATRON_CORE.elementwise_kernels == PYTORCH_EAGER.elementwise_kernels == "fused"
    gpu = get_gpu("h100-sxm")
    kw = dict(b=2, tp=1, cp=1, ep=1, sp=False, flash=True, gpu=gpu, dtype="bf16", recompute=3)
    eager = layer_time(L8, fw=TORCHTITAN, **kw)
    fused = layer_time(L8, fw=replace(TORCHTITAN, elementwise_kernels="fused"), **kw)
    from strategies.cost.hbm_rate import usable_hbm
    extra = (elementwise_bytes.eager_elementwise_bytes_fwd(L8, 2, 1, 1, False)
             - elementwise_bytes.elementwise_bytes_fwd(L8, 2, 1, 1, False)) / usable_hbm(gpu)
    assert eager.fwd - fused.fwd == pytest.approx(extra, rel=1e-9)
    assert eager.bwd - fused.bwd == pytest.approx(2 * extra, rel=1e-9)
    assert eager.recompute - fused.recompute == pytest.approx(extra, rel=1e-9)


def test_bad_kernels_named():
    with pytest.raises(SpecError, match="elementwise_kernels"):
        replace(TORCHTITAN, elementwise_kernels="inductor")


def test_fsdp2_gather_copy_out():
    """FSDP2 copies each ZeRO-3 gather out into the parameters on the compute stream
    (``split_with_sizes_copy``: read 2 + write 2 B per unsharded parameter): the forward and the
    backward of a gathered layer each grow by it, full recomputation does not gather again,
    and a stack without the copy-out (FSDP1, Megatron) is unchanged."""
    from strategies.cost.grad_time import GATHER_COPY_OUT_BYTES
    from strategies.cost.hbm_rate import usable_hbm
    gpu = get_gpu("h100-sxm")
    w = param_counts.layer_params_per_gpu(L8, 1, 1)
    assert GATHER_COPY_OUT_BYTES == 4.0
    want = w * 4.0 / usable_hbm(gpu)
    for rc in (0, 2, 3):
        kw = dict(b=2, tp=1, cp=1, ep=1, sp=False, flash=True, gpu=gpu, dtype="bf16",
                  recompute=rc, fw=TORCHTITAN)
        on, off = layer_time(L8, gathered=True, **kw), layer_time(L8, gathered=False, **kw)
        assert on.fwd - off.fwd == pytest.approx(want, rel=1e-12)
        assert on.bwd - off.bwd == pytest.approx(want, rel=1e-12)
        assert on.recompute == pytest.approx(off.recompute, rel=1e-12)
        fsdp1 = dict(kw, fw=PYTORCH_EAGER)
        assert layer_time(L8, gathered=True, **fsdp1).fwd == layer_time(L8, **fsdp1).fwd

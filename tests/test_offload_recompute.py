"""Fine-grained activation offloading under full recomputation (docs/calibration.md §5.217).

Megatron-Core (NVIDIA/Megatron-LM@d98e8a64dd) accepts ``--fine-grained-activation-offloading``
with ``--recompute-granularity full`` (no rule in ``TransformerConfig.__post_init__``), but a
checkpointed layer's forward runs under ``torch.no_grad`` (``tensor_parallel/random.py``
L616): autograd saves nothing, so its offload groups have nothing to copy, and the layer
input the checkpoint keeps (L628) is saved outside every group. A whole-layer recomputation
therefore offloads nothing: the same step, breakdown and peak as without ``offload_modules``.
The block method's layers past the first ``recompute_layers`` run without a checkpoint and
offload their modules (``megatron/core/recompute.py`` L167-181), which paraplan does not
price: such a plan exits 2 naming the field, the value and the rule."""
from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.simulate import simulate
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.memory.scalar import peak_memory
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset

LLAMA = model_preset("llama3-8b")
ATT = "offload_modules=qkv_linear+core_attn+attn_proj"


@pytest.mark.parametrize("rc", ["recompute=full",
                                "recompute=full,recompute_layers=2,recompute_method=uniform",
                                "recompute=full,recompute_layers=16"])
def test_whole_layer_recompute_offloads_nothing(rc):
    cl = cluster_preset("dgx-h100", 1)
    base = f"tp=1,pp=2,dp=4,mbs=1,{rc}"
    off = make_job(LLAMA, cl, parse_plan(base), global_batch=64)
    on = make_job(LLAMA, cl, parse_plan(f"{base},{ATT}"), global_batch=64)
    e0, e = estimate(off), estimate(on)
    assert e.breakdown_s["offload"] == 0.0
    assert e.step_time_s == e0.step_time_s and e.breakdown_s == e0.breakdown_s
    assert peak_memory(on)[1].total == peak_memory(off)[1].total
    s0, s = simulate(off), simulate(on)
    assert s.metrics["breakdown_s"]["offload"] == 0.0
    assert s.step_time_s == pytest.approx(s0.step_time_s, rel=1e-12)


def test_none_recompute_offloads_what_full_does_not():
    """The same plan without recomputation copies its attention side (the check above
    could not pass by offloading nothing everywhere)."""
    cl = cluster_preset("dgx-h100", 1)
    on = make_job(LLAMA, cl, parse_plan(f"tp=1,pp=2,dp=4,mbs=1,{ATT}"), global_batch=64)
    off = make_job(LLAMA, cl, parse_plan("tp=1,pp=2,dp=4,mbs=1"), global_batch=64)
    assert estimate(on).breakdown_s["offload"] > 0
    assert peak_memory(on)[1].total < peak_memory(off)[1].total


def test_block_partial_recompute_with_offload_is_refused(capsys):
    rc = main(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:1", "--plan",
               f"tp=1,pp=2,dp=4,mbs=1,gbs=64,recompute=full,recompute_layers=4,{ATT}"])
    err = capsys.readouterr().err
    assert rc == 2 and "offload_modules='qkv_linear+core_attn+attn_proj'" in err
    assert "recompute_layers=4 below the 16 layers" in err and "Traceback" not in err
    with pytest.raises(SpecError):     # the block method by name, too
        make_job(LLAMA, cluster_preset("dgx-h100", 1), parse_plan(
            f"tp=1,pp=2,dp=4,mbs=1,recompute=full,recompute_layers=15,"
            f"recompute_method=block,{ATT}"), global_batch=64)

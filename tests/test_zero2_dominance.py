"""ZeRO-2 against ZeRO-1 with expert parallelism (docs/calibration.md §5.108): the per-step
passes stream the dense gradients' 1/(dp·cp) share and the routed experts' 1/edp share, each
over the group that holds its copies (``step.stage_pass_time``, Megatron-Core's separate
expert buffers over the expert-data-parallel group), in closed form; and the search prunes a
ZeRO-2 plan for its ZeRO-1 twin exactly where the estimate ranks the twin at least as fast."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.stage import stage_cost_arrays, stage_costs
from strategies.cost.step import stage_pass_time
from strategies.cost.system import DEFAULT_SYSTEM
from strategies.estimate.analytic import estimate_arrays
from strategies.framework import get_profile
from strategies.plan_arrays import RECOMPUTE_CODE, PlanArrays
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.uneven_tail_gaps import job_of  # noqa: E402

CORE = get_profile(None)
GPU = cluster_preset("hgx-h800", 2).gpu
BW = usable_hbm(GPU, DEFAULT_SYSTEM)
#: Megatron-Core's passes in bf16: zero 4 + scale 8 + check 4 per buffered parameter, norm 4
#: + fp32->bf16 copy 6 per updated one
BUF, UPD = 16.0, 10.0


def closed_form(n, e, dp, edp, zero):
    """Seconds of Megatron-Core's per-step passes over ``n`` parameters, ``e`` of them routed
    experts, dense copies over ``dp`` ranks and the experts' over ``edp``."""
    shard = (n - e) / dp + e / edp
    held = shard if zero >= 2 else n
    updated = shard if zero >= 1 else n
    return (BUF * held + UPD * updated) / BW


@pytest.mark.parametrize("zero", [0, 1, 2])
@pytest.mark.parametrize("dp,ep,tp,etp", [(8, 8, 1, 1), (16, 8, 1, 1), (4, 8, 2, 1),
                                          (8, 1, 1, 1)])
def test_stage_passes_closed_form(zero, dp, ep, tp, etp):
    """edp = tp·dp/(etp·ep) (no ep: every parameter dense); edp = 1 leaves the experts'
    gradients whole under ZeRO-2 as under ZeRO-1."""
    n, e = 9.14e9, 7.05e9
    edp = max(tp * dp / (etp * ep), 1.0) if ep > 1 else dp
    got = stage_pass_time(n, e, tp, 1, dp, ep, etp, zero, zero, False, CORE, GPU, "bf16")
    assert got == pytest.approx(closed_form(n, e, dp, edp, zero), rel=1e-12)
    if ep > 1 and edp == 1 and zero == 2:      # only the dense shard differs from ZeRO-1
        z1 = stage_pass_time(n, e, tp, 1, dp, ep, etp, 1, 1, False, CORE, GPU, "bf16")
        assert z1 - got == pytest.approx(BUF * (n - e) * (1 - 1 / dp) / BW, rel=1e-12)


@pytest.mark.parametrize("zero", [1, 2])
def test_uneven_moe_stage_passes(zero):
    """The per-rank record the scalar estimate and the simulator read (``stage_costs``, an
    uneven DeepSeek-V3 layout, dp 8 ep 8: edp 1) and the arrays' last rank: the closed form of
    each rank's own parameters."""
    job = job_of("moe", "hgx-h800:2", f"pp=2,dp=8,ep=8,mbs=1,gbs=32,first_stage_layers=3,"
                 f"last_stage_layers=5,zero={zero}")
    c = stage_costs(job)
    for s in range(2):
        n, e = c.params_by_stage[s], c.expert_params_by_stage[s]
        assert 0 < e < n
        assert c.passes_by_stage[s] == pytest.approx(closed_form(n, e, 8, 1, zero), rel=1e-12)
    a = stage_cost_arrays(job.model, job.cluster, job.dtype, PlanArrays.from_plans([job.plan]))
    n, e = float(a.params_last[0]), float(a.expert_params_last[0])
    assert float(a.passes_last[0]) == pytest.approx(closed_form(n, e, 8, 1, zero), rel=1e-12)


CASES = [("llama3-8b", "dgx-h100", 2, 32), ("mixtral-8x7b", "dgx-h100", 2, 16)]


@pytest.mark.parametrize("case", CASES)
def test_pruning_never_drops_a_zero2_plan_the_estimate_ranks_faster(case):
    """Each surviving ZeRO-1 plan (without full recompute, whose layers each twin picks
    itself) against its ZeRO-2 twin: the twin is in the space exactly where the estimate
    ranks it faster; some twins are pruned, and some survive."""
    name, preset, nodes, gbs = case
    m, cl = model_preset(name), cluster_preset(preset, nodes)
    sp = enumerate_space(m, cl, gbs, SpaceOptions())
    cols = sp.cols
    names = sorted(cols)

    def rows(c):
        mat = np.column_stack([np.asarray(c[k], dtype=float) for k in names])
        return [r.tobytes() for r in mat]
    have = set(rows(cols))
    z1 = np.flatnonzero((cols["zero"] == 1) & (cols["rc"] != RECOMPUTE_CODE["full"]))
    a = {k: v[z1] for k, v in cols.items()}
    b = dict(a, zero=np.full(len(z1), 2, dtype=cols["zero"].dtype))
    kept = np.array([r in have for r in rows(b)])
    t1, t2 = (estimate_arrays(m, cl, "bf16", PlanArrays.from_columns(x))["step_time_s"]
              for x in (a, b))
    assert (t2[~kept] >= t1[~kept]).all()
    assert (t2[kept] < t1[kept]).all()
    assert (~kept).sum() > 0 and kept.sum() > 0

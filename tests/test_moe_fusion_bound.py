"""experiments/moe_fusion_bound.py: the parts a fused, fully graphed expert path removes, by
the model's own prices (docs/calibration.md §5.17). Closed forms of the cast part, and the
A/B table's per-layer-and-micro-batch division."""
import pytest

from experiments import moe_fusion_bound as fb
from experiments.moe_residuals import BRIDGE_2604
from strategies.cost import hbm_rate, moe_time
from strategies.reference.cases import case_from_entry, load_reference
from topologies.precision import PRECISIONS


def _job(rid):
    return case_from_entry({e["id"]: e for e in load_reference(BRIDGE_2604)}[rid]).job


def test_cast_part_closed_form_and_zero_in_bf16():
    job = _job("mbridge260401_qwen330ba3b_gb200_8_mxfp8")
    m, p, gpu = job.model, job.plan, job.cluster.gpu
    p8, c = PRECISIONS["mxfp8"], gpu.cast_copies("mxfp8")
    elems = 3 * p.mbs * m.seq_length * m.moe_router_topk * m.expert_ffn
    want = 1e3 * elems * (p8.cast_bytes(c, False) - p8.cast_bytes(c, True)) \
        / hbm_rate.usable_hbm(gpu)
    parts = fb.removable_ms(job)
    assert parts["casts"] == pytest.approx(want, rel=1e-12)
    assert all(v >= 0 for v in parts.values())
    bf16 = fb.removable_ms(_job("mbridge260401_gptoss120b_gb200_64_bf16"))
    assert bf16["casts"] == 0.0 and bf16["padding"] == 0.0
    pad = sum(moe_time.expert_pad_time(m, p.mbs, p.tp, p.cp, gpu, "mxfp8", fw=job.framework))
    assert parts["padding"] == pytest.approx(1e3 * pad, rel=1e-12)   # every layer MoE


def test_ab_table_divides_by_micro_batches_and_moe_layers():
    rows = fb.table2()
    assert rows, "the 26.08 rows with the 26.04 entry's ep and micro-batch"
    for rid, m04, m08, saved, e04, e08, saved_est in rows:
        job = _job(rid)
        n = job.plan.gbs / (job.plan.dp * job.plan.mbs) * job.model.num_moe_layers / job.plan.pp
        assert saved == pytest.approx(1e3 * (m04 - m08) / n, rel=1e-12)
        assert saved_est == pytest.approx(1e3 * (e04 - e08) / n, rel=1e-12)

"""Blackwell sustained GEMM rates per precision (docs/calibration.md §5.77): B200's fp8 ratio is
GB200's measured fp8 ratio carried by the power rule; the other carrying rules are checked
against the measurements that test them."""
import pytest

from experiments import blackwell_rates as br
from topologies.gpus import get_gpu
from topologies.gpus.sustained import (B200_FP8_MAMF, B200_SUSTAINED_RATIO,
                                       GB200_FP8_SUSTAINED_RATIO, sm100_fp8_ratio, sustained_ratio)


def test_b200_fp8_is_gb200s_measurement_carried_by_the_power_rule():
    """B200 fp8 = MAMF 3432.5/4500 x 0.759 x (1000 W / 1200 W)^(1/3), both parts 148 SMs; the
    closed form to 1e-12, and the rule gives GB200's own ratio back at GB200's power."""
    want = 3432.5 / 4500 * GB200_FP8_SUSTAINED_RATIO * (1000 / 1200) ** (1 / 3)
    b200 = get_gpu("B200")
    assert b200.fp8_matmul_efficiency == pytest.approx(want, rel=1e-12)
    assert b200.gemm_efficiency("fp8") == b200.gemm_efficiency("mxfp8") \
        == b200.gemm_efficiency("nvfp4") == b200.fp8_matmul_efficiency
    assert sm100_fp8_ratio(1200, 148) == pytest.approx(GB200_FP8_SUSTAINED_RATIO, rel=1e-15)
    assert sm100_fp8_ratio(1000, 148) == pytest.approx(0.7145, abs=5e-4)
    assert B200_FP8_MAMF == br.MAMF[("B200-SXM-180GB", "fp8")] == 3432.5


def test_default_power_rule_is_unchanged():
    """The bf16 rule (B200's node MSMF ratio) still prices B300, GB200 bf16 and GB300."""
    assert sustained_ratio(1000, 148) == B200_SUSTAINED_RATIO
    for name, mamf, peak in (("B300", 1769.0, 2250), ("GB200", 1822.0, 2500)):
        g = get_gpu(name)
        assert g.matmul_efficiency == pytest.approx(
            mamf / peak * B200_SUSTAINED_RATIO * (g.tdp_w / g.sm_count / (1000 / 148)) ** (1 / 3),
            rel=1e-12)
    gb300 = get_gpu("GB300")
    assert gb300.fp8_matmul_efficiency == pytest.approx(
        3615.6 / 5000 * sustained_ratio(1400, 160), rel=1e-12)


def test_same_die_less_power_is_never_faster():
    """B200 and GB200 are the same GB100 die: at 1000 W B200's sustained fp8 rate is below
    GB200's at 1200 W (it was above with B200's bf16 ratio: 2795 against 2745 TFLOP/s), and its
    fp8 clock ratio is not above its bf16 one."""
    b200, gb200 = br.catalog_tflops("B200", "fp8"), br.catalog_tflops("GB200", "fp8")
    assert b200 < gb200
    assert B200_FP8_MAMF * B200_SUSTAINED_RATIO > gb200          # the catalog before §5.77
    assert sm100_fp8_ratio(1000, 148) < B200_SUSTAINED_RATIO


def test_carrying_rules_against_the_harness():
    """Where the Azure harness tests a rule: the bf16 rule is 14 % above GB200's fp8 and 1.8 %
    above GB300's; GB200's fp8 ratio carried to GB300 would be 10.6 % below GB300's measurement
    (so sm_103 keeps the bf16 rule); the fp4 = fp8-fraction rule misses both fp4 runs by more
    than 15 %, in opposite directions (§5.77); GB300's catalog fp4 (§5.178: the fp8 fraction
    times the harness's fp4-over-fp8 fraction) is within the fp8 rule's own 1.8 %."""
    rows = {name: err for name, _p, _m, err in br.rule_rows()}
    assert rows["GB200 fp8: bf16 power rule"] == pytest.approx(0.140, abs=0.002)
    assert rows["GB300 fp8: bf16 power rule (catalog)"] == pytest.approx(0.018, abs=0.002)
    assert rows["GB300 fp8: GB200's fp8 carried by the power rule"] == pytest.approx(-0.106,
                                                                                     abs=0.002)
    assert rows["GB200 fp4: the fp8 fraction (catalog)"] < -0.15
    assert rows["GB300 fp4: the fp8 fraction"] > 0.15
    assert rows["GB300 fp4: the fp8 fraction x the harness's fp4/fp8 (catalog)"] == \
        pytest.approx(rows["GB300 fp8: bf16 power rule (catalog)"], abs=1e-4)


def test_harness_fp4_figures_and_ratios():
    """The fp4 rows of the two Azure files (TFLOP/s at 16384³, 32768³); on one run GB200's fp4
    is 2.64x its fp8 where the datasheet peaks are 2x, GB300's 2.61x where they are 3x."""
    assert br.AZURE_FP4_SUSTAINED == {"GB200": (7627.6, 7487.2), "GB300": (8640.3, 8555.1)}
    got = {p: (h, d) for p, h, d in br.fp4_over_fp8()}
    assert got["GB200"][0] == pytest.approx(2.637, abs=0.001) and got["GB200"][1] == 2.0
    assert got["GB300"][0] == pytest.approx(2.613, abs=0.001) and got["GB300"][1] == 3.0


def test_nemo_pairs_gb200_is_faster():
    """The 7 NeMo 25.02 B200 / 25.04 GB200 pairs: measured GB200 faster in each (1.06-1.32x);
    the model now has GB200 faster in each too (it had the Llama 3 8B and Nemotron 15B pairs at
    0.98x and 0.99x with B200's bf16 ratio on fp8)."""
    rows = br.pair_rows()
    assert len(rows) == 7
    for cid, _d2, _d4, meas, model in rows:
        assert meas > 1.0 and model > 1.0, cid


def test_script_runs(capsys):
    assert br.main(["--pairs"]) == 0
    out = capsys.readouterr().out
    assert "Table 4" in out and "| GB200 | fp8 | 5000 | 3615.6 |" in out


def test_sm100_fp4_sources_disagree():
    """sm_100's fp4-over-fp8 fraction: GB200's sustained harness runs 1.318, B200's burst MXF4
    GEMMs at 8192³ over its fp8 MAMF 0.831 (DeepGEMM) and 0.763 (cuBLAS): on either side of 1,
    so B200 and GB200 keep fp4 at the fp8 fraction (§5.178)."""
    rows = dict(br.sm100_fp4_ratio_rows())
    vals = list(rows.values())
    assert vals[0] == pytest.approx(1.318, abs=1e-3)
    assert vals[1] == pytest.approx(5702 / 9000 / (3432.5 / 4500), rel=1e-12)
    assert vals[2] == pytest.approx(5239 / 9000 / (3432.5 / 4500), rel=1e-12)
    assert vals[0] > 1.0 > vals[1] > vals[2]


def test_fp4_what_if_moves_only_the_parts_each_rule_touches():
    """Table 6: the fp8-fraction column moves only the sm_103 rows (slower catalog now: the
    catalog's error is above the fp8 fraction's), the sm_100 column only the B200/GB200 rows
    (faster: lower error); each row's GPU read from its id."""
    rows = br.fp4_what_if()
    assert len(rows) == 10
    for _f, rid, now, frac, s100 in rows:
        ultra = "_gb300_" in rid or "_b300_" in rid
        if ultra:
            assert now > frac and s100 == now, rid
        else:
            assert frac == now and s100 < now, rid

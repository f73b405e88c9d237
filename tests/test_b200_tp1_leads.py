"""The NeMo 25.02 B200 tp 1 pp 1 rows' leads (docs/calibration.md §5.126,
experiments/b200_tp1_leads.py): what the 25.02 scripts ran, priced on the row's own job,
does not close the rows; the same release on H100 at tp 1 pp 1 is not too fast."""
from __future__ import annotations

import experiments.b200_tp1_leads as lead


def test_data_parallel_leads_cannot_close_the_one_node_row():
    """Llama 3 8B on one DGX B200: every reduce-scatter and gather exposed, or plain DDP,
    moves the row by under one point (the traffic stays on NVLink), while it misses by more
    than five times that."""
    c = lead._cases("nemo_performance_25.json")["nemo2502_llama38b_b200_8"]
    w = lead.leads(c)
    assert w["as read"] < -5.0
    for k in ("DP overlaps off", "ZeRO-0"):
        assert 0.0 < w[k] - w["as read"] < 1.0, k
    # the row ran eager (v2.2.0 pretrain_llama3_8b.py: graphs for no GPU); toggling graphs
    # prices nothing on a dense row
    assert abs(w["graphs toggled"] - w["as read"]) < 0.05


def test_same_release_tp1_on_h100_is_not_too_fast():
    """NeMo 25.02.01's Llama 3.1 8B at tp 1 pp 1 on H100 (DGX Cloud), FP8 and bf16: every
    row's estimate is at or above its measurement: the release's tp 1 path is not what the
    B200 rows miss."""
    cases = lead._cases("dgxc_2505.json")
    rows = [c for i, c in cases.items() if i.startswith(lead.H100_PREFIX) and c.job]
    assert len(rows) == 10
    for c in rows:
        assert c.job.plan.tp == 1 and c.job.plan.pp == 1
        assert lead.error_pct(c) > 0.0, c.id


def test_tp2_lead_only_where_the_gpus_divide():
    c = lead._cases("nemo_performance_25.json")["nemo2502_nemotron15b_b200_64"]
    assert lead.leads(c)["tp2 dp/2 sp"] is not None
    assert lead.error_pct(c) == lead.leads(c)["as read"]

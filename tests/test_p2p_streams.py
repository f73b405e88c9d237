"""The stream rule of Megatron-Core's pipeline transfers (``strategies.schedules.p2p_streams``,
docs/calibration.md §5.63): with pp = 2 Megatron puts the two directions on two process
groups, so no call of an exchange serialises four transfers; the estimate and the
simulation charge one message per exchange, the serial sum the rule states."""
from dataclasses import replace

import numpy as np
import pytest

from strategies.estimate.scalar import estimate, step_arrays
from strategies.framework import get_profile
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.schedules import get_schedule
from strategies.schedules import p2p_streams as ps
from topologies.cluster import cluster_preset

FWD, BWD = ps.SEND_FORWARD_RECV_FORWARD, ps.SEND_BACKWARD_RECV_BACKWARD
ALL4 = ps.SEND_FORWARD_BACKWARD_RECV_FORWARD_BACKWARD


def test_pp2_puts_each_direction_on_its_own_stream():
    """Megatron's pp = 2 split (pipeline group one way, WORLD the other): a rank's sends
    share one stream, its receives another, whichever peer side they name."""
    assert {ps.stream_of(op, 2) for op in ALL4 if op[0] == "send"} == {"out"}
    assert {ps.stream_of(op, 2) for op in ALL4 if op[0] == "recv"} == {"in"}
    # pp > 2: one stream per neighbour pair, each with one send and one receive
    for side in ("next", "prev"):
        on = [op for op in ALL4 if ps.stream_of(op, 4) == side]
        assert sorted(k for k, _ in on) == ["recv", "send"]


@pytest.mark.parametrize("t", [1.87e-3, 0.25])
def test_a_pp2_exchange_of_message_time_t_exposes_the_rules_serial_sum(t):
    """Closed forms: NeMo's overlapped calls at pp = 2 hold one transfer per stream (t, not
    the 4t of the lead of §5.57); the unbatched four-transfer call would hold two (2t) at any
    pp; a batched call is one launch (t); 1F1B's send-forward/receive-backward is t at pp = 2
    (two groups) and 2t at pp > 2 (one peer pair)."""
    assert ps.call_time(t, FWD, 2) == t and ps.call_time(t, BWD, 2) == t
    assert ps.call_time(t, FWD, 8) == t and ps.call_time(t, BWD, 8) == t
    assert ps.call_time(t, ALL4, 2) == 2 * t and ps.call_time(t, ALL4, 4) == 2 * t
    assert ps.call_time(t, ALL4, 2, batched=True) == t
    assert ps.call_time(t, ps.SEND_FORWARD_RECV_BACKWARD, 2) == t
    assert ps.call_time(t, ps.SEND_FORWARD_RECV_BACKWARD, 3) == 2 * t
    assert ps.call_time(t, ps.SEND_BACKWARD_RECV_FORWARD, 3) == 2 * t
    assert ps.serial_transfers((), 2) == 0


def test_overlapped_call_exposes_what_outlasts_the_other_pass():
    assert ps.overlapped_exposed(3.0, 2.0) == 1.0
    assert ps.overlapped_exposed(1.0, 2.0) == 0.0
    np.testing.assert_array_equal(ps.overlapped_exposed(np.array([1.0, 3.0, 2.0]), 2.0),
                                  [0.0, 1.0, 0.0])


@pytest.mark.parametrize("ops,pp,msg", [(FWD, 1, "pp=1"), ((("put", "next"),), 2, "kind"),
                                        ((("send", "up"),), 4, "side")])
def test_bad_input_names_the_field(ops, pp, msg):
    with pytest.raises(ValueError, match=msg):
        ps.serial_transfers(ops, pp)


def test_estimate_charges_a_pp2_interleaved_exchange_the_rules_serial_sum():
    """A pp = 2 interleaved plan's exposed pipeline time is the schedule's exposed exchanges
    times one call's stream time under the rule (one message: ``p2p_time_s``), to floating
    point; the simulation exposes the same count (``tests/test_interleaved_grad_window``)."""
    model = replace(model_preset("llama3-8b"), num_layers=16, seq_length=2048)
    plan = parse_plan("tp=2,pp=2,dp=8,mbs=1,gbs=32,schedule=interleaved,vpp=2,zero=1,sp=true")
    core = get_profile("megatron-core")
    # blocking batched calls (``overlap_p2p_comm`` off)
    job = make_job(model, cluster_preset("dgx-h100", 4), plan,
                   framework=replace(core, overlap_p2p_comm=False))
    t = float(step_arrays(job)["p2p_time_s"])
    n = float(get_schedule("interleaved").exposed_messages(job.num_microbatches, 2, 2))
    pp_comm = estimate(job).breakdown_s["pp_comm"]
    assert pp_comm == pytest.approx(n * float(ps.call_time(t, FWD, 2)), rel=1e-12)
    assert pp_comm == pytest.approx(n * float(ps.call_time(t, ALL4, 2, batched=True)),
                                    rel=1e-12)
    assert pp_comm < n * 4 * t      # the lead's four serial transfers are not what runs
    # Megatron-Core's default, ``overlap_p2p_comm`` (§5.68): the fill's and the drain's chain
    job = make_job(model, cluster_preset("dgx-h100", 4), plan, framework=core)
    assert estimate(job).breakdown_s["pp_comm"] == pytest.approx(
        2 * (2 * 2 - 1) * float(ps.call_time(t, FWD, 2)), rel=1e-12)


def test_simulated_pp2_exchange_exposes_the_rules_serial_sum():
    """A pp = 2 interleaved pipeline alone on NVLink (``experiments/p2p_exchange_count``): the
    simulated step grows by the exposed exchanges times one call's serial transfers (1) per
    message time, not four times that."""
    import sys
    sys.path.insert(0, "experiments")
    from p2p_exchange_count import counts
    n = float(get_schedule("interleaved").exposed_messages(8, 2, 2))
    _, s = counts("interleaved", 2, 2, 8)
    assert s == pytest.approx(n * ps.serial_transfers(FWD, 2), abs=0.1)
    assert s < n * ps.serial_transfers(ALL4, 2)

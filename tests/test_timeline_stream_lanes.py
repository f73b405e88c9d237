"""A timeline that asks for ``pp-comm`` draws the overlapped pipeline calls' stream lanes
(``pp-comm out``/``in``/``next``/``prev``, calibration §5.68) as well as the base stream."""
from simulator.output.timeline import _layout
from simulator.simulate import simulate
from strategies.job import make_job
from strategies.plan import parse_plan
from strategies.presets import model_preset
from topologies.cluster import cluster_preset


def test_pp_comm_takes_its_lanes():
    job = make_job(model_preset("llama3-8b"),
                   cluster_preset("dgx-h100", 1),
                   parse_plan("tp=1,pp=4,dp=2,mbs=1,gbs=16,schedule=interleaved,vpp=2"),
                   framework="megatron-core")
    res = simulate(job)
    lanes = {r.stream for r in res.records if r.stream.startswith("pp-comm ")}
    assert lanes                                  # the overlapped calls run on their lanes
    shown = _layout(res, 64, ("compute", "pp-comm")).streams
    assert shown[0] == "compute" and lanes <= set(shown)
    assert _layout(res, 64, ("compute",)).streams == ["compute"]

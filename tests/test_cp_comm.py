"""Plan field ``cp_comm`` (Megatron-Core's ``--cp-comm-type``): Transformer Engine's p2p ring or
its K/V all-gather (``AttnFuncWithCPAndKVAllGather``, Llama 3's CP). The gathered bytes, the
all-gather path's HBM passes and working set as closed forms, its kernels' grid
(``attention_grid.allgather_factor``), a cp = 1 plan bit for bit unchanged, the stack rule,
the plan syntax and file round trip. docs/calibration.md §5.134."""
from __future__ import annotations

from dataclasses import replace

import pytest

from strategies.cost import attention_grid as ag
from strategies.cost import comm_bytes, cp_allgather
from strategies.cost.stage import stage_costs
from strategies.errors import SpecError
from strategies.estimate.scalar import estimate
from strategies.job import make_job
from strategies.launch import megatron_args
from strategies.memory.scalar import memory_components
from strategies.plan import parse_plan, plan_from_mapping
from strategies.plan_file import plan_file_text, read_plan_file
from strategies.presets import model_preset
from tests.fuzz_profile import run_cli
from topologies.cluster import cluster_preset

L405 = model_preset("llama3-405b")          # 8 KV heads, 128 query heads, head dim 128


def _job(spec: str, framework: str | None = "megatron-core", seq: int = 16384, nodes: int = 2):
    m = replace(model_preset("gpt-1.7b"), seq_length=seq)
    return make_job(m, cluster_preset("dgx-h100", nodes), parse_plan(spec),
                    framework=framework)


def test_gather_bytes_closed_form() -> None:
    """K and V of the whole sequence over one GPU's KV heads: ``2·b·s·g·(d + d_v)/t`` bytes;
    Llama 3 405B at 128K, tp 8 (one KV head a rank): 2·131,072·8·256/8 = 64 MiB exactly; the
    ring moves ``(c-1)/c`` of it a pass; the stage record times every CP collective on it."""
    m = L405.with_seq_length(131072)
    assert comm_bytes.cp_gather_bytes(m, 1, 8, 16) == 2 * 131072 * 8 * 256 / 8 == 64 * 2**20
    assert comm_bytes.cp_gather_bytes(m, 2, 8, 16, "query") == 2 * 2 * 131072 * 128 * 256 / 8
    ring = comm_bytes.cp_comm_bytes_fwd(m, 1, 8, 16)
    assert ring == pytest.approx(64 * 2**20 * 15 / 16, rel=1e-15)
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=all_gather")
    g = 2 * 16384 * job.model.kv_heads * (job.model.head_dim + job.model.v_dim) / 2
    assert float(stage_costs(job).cp_bytes) == pytest.approx(g, rel=1e-15)


def test_copy_and_working_bytes_closed_forms() -> None:
    """The all-gather path's HBM passes and working set (``cp_allgather``), Llama 3 405B at
    128K, tp 8, cp 16: ``G`` = 64 MiB; the rank's O and Q are 8,192 tokens x 16 heads x 128 x 2 B
    = 32 MiB each; forward 2·G + 2·O, backward (5 + 3·(1 + 1/32))·G + 2·Q, working set
    (4 + 1/32)·G."""
    m = L405.with_seq_length(131072)
    G, O = 64 * 2**20, 32 * 2**20
    assert cp_allgather.copy_bytes_fwd(m, 1, 8, 16) == pytest.approx(2 * G + 2 * O, rel=1e-15)
    assert cp_allgather.copy_bytes_bwd(m, 1, 8, 16) == pytest.approx(
        (5 + 3 * (1 + 1 / 32)) * G + 2 * O, rel=1e-15)
    assert cp_allgather.working_bytes(m, 1, 8, 16) == pytest.approx((4 + 1 / 32) * G,
                                                                    rel=1e-15)


def test_memory_holds_the_working_set() -> None:
    """The all-gather plan's peak holds ``working_bytes`` more than the ring's, in "other"."""
    p2p, ag_ = (_job(f"tp=2,cp=4,mbs=1,gbs=4,cp_comm={c}") for c in ("p2p", "all_gather"))
    a, b = memory_components(p2p, 0), memory_components(ag_, 0)
    w = cp_allgather.working_bytes(ag_.model, 1, 2, 4)
    assert b["other"].other - a["other"].other == pytest.approx(w, rel=1e-12)
    assert b["layers"] == a["layers"]


def _grid(fixed: float = 0.0) -> ag.GridKernel:
    return ag.GridKernel("t", "head_asc", 1, fixed)


def test_allgather_grid_closed_forms() -> None:
    """cp 2, two query tiles a chunk, one head (no fixed cost): rank 0 runs chunks 0 and 3
    (forward CTAs of 1, 2 and 7, 8 key tiles), rank 1 chunks 1 and 2 (3, 4 and 5, 6): 18
    tiles each, ``(2c-1)·q² + q·(q+1)``. One SM: the factor is 1. A slot a CTA: the longest,
    8 (rank 0): 18/100/8. Two SMs, rank 0's list schedule (1, 2, then 7 on the first slot
    free, 8): 10, rank 1's (3, 4, 3+5, 4+6): 10: 18/2/10. The backward (a CTA per key
    tile: chunk 3's six keys before it take 2 query tiles each, its own 2 and 1) one slot a
    CTA: 18/100/2. At cp 1 the plain causal grid."""
    k = _grid()
    seq = 2 * 2 * 2 * ag.TILE
    assert ag.allgather_factor(k, 1, seq, 2, 1, True) == pytest.approx(1.0, rel=1e-15)
    assert ag.allgather_factor(k, 1, seq, 2, 100, True) == pytest.approx(18 / 100 / 8,
                                                                         rel=1e-15)
    assert ag.allgather_factor(k, 1, seq, 2, 2, True) == pytest.approx(18 / 2 / 10, rel=1e-15)
    assert ag.allgather_factor(k, 1, seq, 2, 100, False) == pytest.approx(18 / 100 / 2,
                                                                          rel=1e-15)
    assert sorted(ag._gather_lengths("head_asc", 2, 3, False)) == [1, 2, 2, 2, 2, 2, 2, 2]
    for kern in (ag.CUDNN_FWD, ag.CUDNN_BWD):
        assert ag.allgather_factor(kern, 16, 8192, 1, 132, kern is ag.CUDNN_FWD) == \
            ag.grid_factor(kern, 16, 64, 132)


def test_allgather_grid_at_128k_fills_the_gpu_better_than_the_ring() -> None:
    """Llama 3 405B's 128K row (16 heads a rank, cp 16, 132 SMs): the all-gather's long
    forward CTAs (up to 1,024 key tiles) and its two kernels on two streams fill the GPU
    better than the ring's 16 steps of 32-64-tile CTAs in whole waves; both below 1."""
    f_ag = ag.allgather_factor(ag.CUDNN_FWD, 16, 131072, 16, 132, True)
    b_ag = ag.allgather_factor(ag.CUDNN_BWD, 16, 131072, 16, 132, False)
    f_r = ag.ring_factor(ag.CUDNN_FWD, 16, 131072, 16, 132)
    b_r = ag.ring_factor(ag.CUDNN_BWD, 16, 131072, 16, 132)
    assert f_r < f_ag < 1.0 and b_r < b_ag < 1.0


def test_cp1_plan_unchanged_bit_for_bit() -> None:
    """At cp 1 the exchange has nothing to move: the estimate, its breakdown and the memory
    are the same floats with and without ``cp_comm=all_gather``."""
    base = _job("tp=2,pp=2,mbs=1,gbs=16", seq=4096)
    for comm in ("all_gather", "p2p"):
        other = _job(f"tp=2,pp=2,mbs=1,gbs=16,cp_comm={comm}", seq=4096)
        e0, e1 = estimate(base), estimate(other)
        assert e1.step_time_s == e0.step_time_s
        assert e1.breakdown_s == e0.breakdown_s
        assert memory_components(other, 0) == memory_components(base, 0)


def test_p2p_stated_is_the_default() -> None:
    """Megatron-Core's default exchange is p2p: stating it changes no figure."""
    e0 = estimate(_job("tp=2,cp=4,mbs=1,gbs=4"))
    e1 = estimate(_job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=p2p"))
    assert e1.step_time_s == e0.step_time_s and e1.breakdown_s == e0.breakdown_s
    e2 = estimate(_job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=all_gather"))
    assert e2.step_time_s > e0.step_time_s
    assert e2.job.framework.cp_impl == "allgather" and e0.job.framework.cp_impl == "ring"


def test_plan_syntax_and_file_round_trip(tmp_path) -> None:
    """``cp_comm`` (alias ``cp_comm_type``) in key=value text and in a plan file; the short
    label names it; a value the model has no form for is refused naming field and rule."""
    p = parse_plan("tp=8,cp=16,pp=16,cp_comm=all_gather")
    assert p.cp_comm == "all_gather" and "cp16:ag" in p.short()
    assert parse_plan("cp=2,cp_comm_type=P2P").cp_comm == "p2p"
    assert parse_plan("cp=2").cp_comm is None and "cp2 " in parse_plan("cp=2").short()
    path = tmp_path / "plan.yaml"
    path.write_text(plan_file_text(p, str(path)))
    back, _ = read_plan_file(str(path))
    assert back == p
    assert plan_from_mapping({"cp": 2, "cp_comm": None}).cp_comm is None
    with pytest.raises(SpecError, match=r"cp_comm='a2a\+p2p': a2a\+p2p needs hierarchical_cp"):
        parse_plan("cp=2,cp_comm=a2a+p2p")
    with pytest.raises(SpecError, match=r"cp_comm='ulysses': must be one of p2p, all_gather, "
                                        r"a2a, a2a\+p2p"):
        parse_plan("cp=2,cp_comm=ulysses")
    with pytest.raises(SpecError, match="cp_comm"):
        plan_from_mapping({"cp": 2, "cp_comm": 3})
    job = _job("tp=2,cp=4,mbs=1,gbs=4,cp_comm=all_gather")
    assert "--cp-comm-type all_gather" in megatron_args(job)[0]


def test_stack_without_it_refuses() -> None:
    """torchtitan runs PyTorch's own ring: ``cp_comm`` refused, naming stack, feature and
    rule, by ``make_job`` and by the CLI (exit 2, one line)."""
    with pytest.raises(SpecError, match=r"cp_comm='all_gather': torchtitan runs context "
                                        r"parallelism only its own way"):
        _job("tp=2,cp=4,mbs=1,gbs=4,zero=3,cp_comm=all_gather", framework="torchtitan")
    rc, _, err = run_cli(["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100:2",
                          "--framework", "torchtitan", "--plan",
                          "tp=4,cp=2,gbs=8,cp_comm=all_gather"])
    assert rc == 2
    err = err.strip()
    assert len(err.splitlines()) == 1
    assert "cp_comm='all_gather'" in err and "torchtitan" in err and "no cp_comm" in err

"""The Transformer Engine release a stack ran decides what its grouped experts save under
per-tensor fp8 (``FrameworkProfile.te_version``, ``activations.expert_input_bytes``,
``entry_stack.NEMO_CONTAINER_TE``; docs/calibration.md §5.103, extension teversion): TE 2.0
to 2.2 keep the data and, on Hopper (TN-only fp8 GEMMs), the transpose (2 B per element);
TE 1.x and >= 2.3 one copy (1 B); unstated reads TE >= 2.3. Closed forms to floating-point
precision, the two 25.04 H100 rows on a TE 2.2 stack, bf16 unchanged to the bit, arrays and
search equal to the scalar model; each documented container reads its stated release."""
from __future__ import annotations

import dataclasses
import glob

import pytest

from strategies.cost import token_counts
from strategies.errors import SpecError
from strategies.job import make_job
from strategies.memory import activations as act
from strategies.memory.arrays import peak_memory_arrays, rank_memory_arrays
from strategies.memory.scalar import memory_by_stage, peak_memory
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays
from strategies.presets import model_preset
from strategies.reference.cases import case_from_entry, load_reference
from strategies.framework import get_profile
from strategies.reference.entry_stack import (NEMO_CONTAINER_TE, TE_UNDOCUMENTED,
                                              with_te_version, nemo_container)
from strategies.stacks.megatron import MEGATRON_CORE as _MCORE
from tests.memory_checks import assert_search_equals_scalar
from topologies.cluster import cluster_preset

QWEN = model_preset("qwen3-30b-a3b")
PER_TENSOR = ("fp8", "fp8-delayed", "fp8-current")
# TE's dense modules' saved copies (§5.113) apart: the expert rule alone
MEGATRON_CORE = dataclasses.replace(_MCORE, te_linears=False)
TE22 = dataclasses.replace(MEGATRON_CORE, te_version=(2, 2))
ROWS = {"dgxc2505_grok1_314b_h100_512_fp8": 208896,       # 2h + 4F + 2F per routed copy
        "dgxc2505_llama4_400b_h100_512_fp8": 59392}


def _job(dtype, cluster="dgx-h100", fw=TE22, pp=1, imbalance=None):
    """Qwen3-30B-A3B on 8 GPUs (every layer MoE), Megatron-Core's unfused TE path."""
    plan = Plan(pp=pp, ep=8 // pp, mbs=1, gbs=16, moe_imbalance=imbalance)
    return make_job(QWEN, cluster_preset(cluster, 1), plan, dtype=dtype, framework=fw)


def _rows() -> dict:
    """The dgxc 25.05 entries by id (their jobs as the reader builds them)."""
    return {e["id"]: case_from_entry(e) for e in
            load_reference("strategies/reference/data/dgxc_2505.json")}


@pytest.mark.parametrize("dtype", PER_TENSOR)
def test_bytes_by_release_and_chip(dtype):
    """Per-tensor fp8: 2 B on a TN-only chip under TE 2.0-2.2, 1 B on Blackwell there and
    on every chip under TE 1.x, >= 2.3 and unstated."""
    for v in ((2, 0), (2, 1), (2, 2)):
        assert act.expert_input_bytes(True, dtype, v, tn_only=True) == 2.0
        assert act.expert_input_bytes(True, dtype, v, tn_only=False) == 1.0
    for v in ((1, 10), (1, 13), (2, 3), (2, 9), (2, 16), None):
        for tn in (True, False):
            assert act.expert_input_bytes(True, dtype, v, tn_only=tn) == 1.0
    assert act.expert_input_bytes(False, dtype, (2, 2), tn_only=True) is None


def test_other_precisions_ignore_the_release():
    """MXFP8 keeps ``1 + 1/32`` and the 16-bit and unread recipes None under any release."""
    assert act.expert_input_bytes(True, "mxfp8", (2, 2), tn_only=True) == 1 + 1 / 32
    for other in ("bf16", "fp16", "fp8-blockwise"):
        assert act.expert_input_bytes(True, other, (2, 2), tn_only=True) is None


def test_job_reads_profile_and_chip():
    """``job_expert_input_bytes``: the stack's release and ``Cluster.gpu``'s TN-only flag."""
    assert act.job_expert_input_bytes(_job("fp8")) == 2.0
    assert act.job_expert_input_bytes(_job("fp8", "dgx-b200")) == 1.0
    assert act.job_expert_input_bytes(_job("fp8", fw=MEGATRON_CORE)) == 1.0


@pytest.mark.parametrize("bad", [(2,), (2, 2, 0), ("2", "2"), (2, True), (2, -1), "2.2"])
def test_bad_release_refused(bad):
    with pytest.raises(SpecError, match="framework.te_version"):
        dataclasses.replace(MEGATRON_CORE, te_version=bad)


@pytest.mark.parametrize("dtype", PER_TENSOR)
@pytest.mark.parametrize("imbalance", [None, 1.25])
def test_hopper_te22_stash_is_the_bf16_table_to_the_bit(dtype, imbalance):
    """Both copies (2 B) are the 16-bit table's bytes: one MoE layer's stash on H100 under
    TE 2.2 equals the bf16 job's to the bit, and lies ``load·T·k·(2 − 1)·(h + F)`` above
    the TE >= 2.3 one (1e-12)."""
    job = _job(dtype, imbalance=imbalance)
    ref = make_job(QWEN, job.cluster, job.plan, dtype="bf16", framework=TE22)
    assert act.job_layer_activation_bytes(job) == act.job_layer_activation_bytes(ref)
    new = dataclasses.replace(job, framework=MEGATRON_CORE)
    p = job.plan
    load = token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, QWEN, p.mbs, p.tp, p.cp,
                           p.expert_tp)
    want = load * job.seq_len * p.mbs * QWEN.moe_router_topk * (QWEN.hidden_size
                                                                 + QWEN.expert_ffn)
    got = act.job_layer_activation_bytes(job) - act.job_layer_activation_bytes(new)
    assert got == pytest.approx(want, rel=1e-12)


def test_blackwell_te22_equals_te23_to_the_bit():
    """On B200 TE 2.2 allocates no transpose: the same stash as TE >= 2.3."""
    job = _job("fp8-current", "dgx-b200", imbalance=1.25)
    new = dataclasses.replace(job, framework=MEGATRON_CORE)
    assert memory_by_stage(job) == memory_by_stage(new)


@pytest.mark.parametrize("dtype", ["bf16", "mxfp8"])
def test_other_precisions_unchanged_to_the_bit(dtype):
    """bf16 (and MXFP8) jobs on H100 model the same memory under TE 2.2 as unstated."""
    cl = "dgx-b200" if dtype == "mxfp8" else "dgx-h100"
    job = _job(dtype, cl, pp=2, imbalance=1.25)
    assert memory_by_stage(job) == memory_by_stage(dataclasses.replace(job,
                                                                       framework=MEGATRON_CORE))


#: each container's TE release as NVIDIA's component tables print it (docs/calibration.md
#: §5.122): the NeMo Framework User Guide 24.09 page (24.07, 24.09) and Megatron-Bridge
#: ``docs/releases/software-versions.md`` (25.09 to 26.06)
STATED = {"24.07": "1.8.0.dev0", "24.09": "1.10", "25.09": "2.7.0", "25.11": "2.9",
          "26.02": "2.12", "26.04": "2.14+71bbefb", "26.06": "2.16"}


def _stated(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a printed release (``"2.14+71bbefb"`` -> (2, 14))."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def test_each_documented_container_reads_its_stated_release():
    """The map holds exactly the documented containers at their printed releases; a row
    naming one (``nvcr.io/nvidia/nemo:yy.mm``, on ``nemo`` and ``megatron-core``) reads it,
    said in its notes; another stack keeps its own."""
    assert NEMO_CONTAINER_TE == {tag: _stated(v) for tag, v in STATED.items()}
    for tag, v in STATED.items():
        for name in ("nemo", "megatron-core", "torchtitan"):
            fw, notes = get_profile(name), []
            row = {"source": {"ref": f"container nvcr.io/nvidia/nemo:{tag}.01"}}
            got = with_te_version(row, fw, notes)
            if name == "torchtitan":
                assert got is fw and not notes
                continue
            assert got.te_version == _stated(v) == NEMO_CONTAINER_TE[tag]
            assert notes == [f"Transformer Engine {_stated(v)[0]}.{_stated(v)[1]} "
                             f"(NeMo {tag} container)"]


def test_reference_rows_read_their_containers_release():
    """Every reference row on a NeMo/Megatron-Core stack that names a documented container
    runs its release (24.07, 25.11, 26.04 and 26.06 rows are in the files)."""
    seen = set()
    for f in sorted(glob.glob("strategies/reference/data/*.json")):
        if f.endswith("schedule_studies.json"):
            continue
        for e in load_reference(f):
            case, tag = case_from_entry(e), nemo_container(e)
            if case.job is None or tag not in STATED or case.job.framework.name not in (
                    "nemo", "megatron-core"):
                continue
            assert case.job.framework.te_version == _stated(STATED[tag]), e["id"]
            seen.add(tag)
    assert {"24.07", "25.11", "26.04", "26.06"} <= seen


def test_reader_leaves_undocumented_containers_unstated():
    """The 24.12, 25.02, 25.04 and 25.07 containers' TE releases are in no NVIDIA component
    table (docs/calibration.md §5.122, §5.126): their rows keep None (the newest releases'
    rules), said in the notes; the 25.04 rows' GB200 twins alike, and the NeMo performance
    summary's ``Container: NeMo 25.0x`` rows (25.07 only there)."""
    rows = {**_rows(), **{e["id"]: case_from_entry(e) for e in load_reference(
        "strategies/reference/data/nemo_performance_25.json")}}
    for tag in ("24.12", "25.02", "25.04", "25.07"):
        assert tag not in NEMO_CONTAINER_TE
        named = [c for c in rows.values() if c.job is not None and nemo_container(c.raw) == tag]
        assert named, tag
        for case in named:
            assert case.job.framework.te_version is None, case.raw["id"]
            assert f"Transformer Engine of the NeMo {tag} container: {TE_UNDOCUMENTED}" in \
                case.assumptions, case.raw["id"]


def _te22(rid: str):
    """The dgxc 25.05 row ``rid``'s job on a TE 2.2 stack (what NeMo v2.3.x's installer pin
    would give; no NVIDIA table states the 25.04 container's release)."""
    job = _rows()[rid].job
    return dataclasses.replace(job, framework=dataclasses.replace(job.framework,
                                                                  te_version=(2, 2)))


@pytest.mark.parametrize("rid", sorted(ROWS))
def test_two_h100_rows_per_token_bytes_and_layer_closed_form(rid):
    """The two 25.04 H100 rows on a TE 2.2 stack save both 1-byte copies: per routed copy
    ``2h + 4F + 2F``
    (Grok-1 208896 B, Llama 4 Maverick 59392 B), and each stashed layer holds
    ``share·load·T·k·(2 − 1)·(h·etp/t + F/t)`` (``T = s·b/cp``) more than under TE >= 2.3
    (1e-12); their Blackwell twins read 1 B."""
    job = _te22(rid)
    m, p = job.model, job.plan
    q = act.job_expert_input_bytes(job)
    assert q == 2.0
    assert sum(act.routed_token_saved_bytes(m, q)) == ROWS[rid]
    assert act.routed_token_saved_bytes(m, q) == act.routed_token_saved_bytes(m)
    new = dataclasses.replace(job, framework=dataclasses.replace(job.framework,
                                                                 te_version=None))
    load = token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, m, p.mbs, p.tp, p.cp,
                           p.expert_tp)
    etp = p.tp if p.expert_tp is None else p.expert_tp
    T = job.seq_len * p.mbs / p.cp
    want = (m.num_moe_layers / m.num_layers * load * T * m.moe_router_topk
            * (m.hidden_size * etp / p.tp + m.expert_ffn / p.tp))
    got = act.job_layer_activation_bytes(job) - act.job_layer_activation_bytes(new)
    assert got == pytest.approx(want, rel=1e-12)
    assert peak_memory(job)[1].total > peak_memory(new)[1].total


@pytest.mark.parametrize("cluster,q", [("dgx-h100", 2.0), ("dgx-b200", 1.0)])
@pytest.mark.parametrize("pp", [1, 2])
def test_arrays_equal_scalar(cluster, q, pp):
    """``rank_memory_arrays``/``peak_memory_arrays`` at the job's ``expert_input`` equal
    ``memory_by_stage`` on every rank and at the peak (1e-12) under TE 2.2."""
    job = _job("fp8-current", cluster, pp=pp, imbalance=1.25)
    assert act.job_expert_input_bytes(job) == q
    P = PlanArrays.from_plans([job.plan])
    kw = dict(loss_bytes=job.framework.loss, dispatch_bytes=act.job_dispatch_bytes(job),
              expert_input=q, te_inputs=act.job_te_linear_bytes(job))
    stages = memory_by_stage(job)
    for s in range(pp):
        got = float(rank_memory_arrays(job.model, P, s, job.dtype, job.system,
                                       job.cluster.gpu, **kw)[0])
        assert got == pytest.approx(stages[s].total, rel=1e-12), s
    peak = float(peak_memory_arrays(job.model, P, job.dtype, job.system, job.cluster.gpu,
                                    **kw)[0])
    assert peak == pytest.approx(max(x.total for x in stages), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("cluster,q", [("dgx-h100", 2.0), ("dgx-b200", 1.0)])
def test_search_equals_scalar(cluster, q):
    """The search's memory prune for a TE 2.2 stack in fp8 equals ``peak_memory`` of each
    sampled plan (it reads the stack's release and the chip)."""
    assert_search_equals_scalar(QWEN, cluster_preset(cluster, 1), "fp8", q, framework=TE22)


def test_simulated_activation_peak_reads_the_release():
    """The simulator's activation track equals ``memory_by_stage``'s activations of a TE 2.2
    fp8 job on H100 on every rank (1e-9)."""
    from simulator.output.metrics_json import activation_memory_json
    from simulator.simulate import simulate
    b = _job("fp8", pp=2, imbalance=1.25)
    stages = memory_by_stage(b)
    assert stages != memory_by_stage(dataclasses.replace(b, framework=MEGATRON_CORE))
    rows = activation_memory_json(simulate(b), b)
    assert rows
    for r in rows:
        assert r["peak_bytes"] == pytest.approx(stages[r["stage"]].activations, rel=1e-9), r

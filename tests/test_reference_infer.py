"""Reading published runs' free text (strategies/reference/text.py) and building their jobs
(strategies/reference/cases.py): GPUs, links, model families, software, recompute and schedule
words, and the step time implied by a utilisation."""
from __future__ import annotations

import copy
import doctest

import pytest

from simulator.studies.validate import load_cases
from strategies.reference import text as ri
from strategies.cost.flop_counts import model_flops_per_step
from strategies.errors import SpecError
from strategies.reference.cases import case_from_entry, load_reference


def test_module_doctests():
    assert doctest.testmod(ri).failed == 0


@pytest.mark.parametrize("text,gpu,preset", [
    ("H100-SXM 80GB", "H100-SXM5-80GB", "dgx-h100"),
    ("H100 PCIe", "H100-PCIe-80GB", "hgx-h100-pcie"),
    ("H100 96GB HBM2e (500W)", "H100-96GB-500W", None),
    ("NVIDIA H200 141GB", "H200-SXM-141GB", "dgx-h200"),
    ("B200", "B200-SXM-180GB", "dgx-b200"),
    ("AMD Instinct MI300X", "MI300X", "mi300x"),
    ("A100-SXM4-40GB", "A100-SXM4-40GB", "dgx-a100-40gb"),
    ("A100 40 GB", "A100-SXM4-40GB", "dgx-a100-40gb"),
    ("A100-SXM4-80GB", "A100-SXM4-80GB", "dgx-a100"),
    ("V100 32GB", "V100-SXM2-32GB", None),
    ("H800 80GB", "H800-SXM5-80GB", "hgx-h800"),
    ("A800-SXM4-80GB", "A100-SXM4-80GB", None),
])
def test_gpu_text_to_catalog(text, gpu, preset):
    assert ri.gpu_preset(text) == (gpu, preset)


def test_unknown_gpu_is_none():
    assert ri.gpu_preset("TPU v4") is None and ri.gpu_preset("") is None


@pytest.mark.parametrize("text,per,links", [
    ("8x 200 Gb/s HDR InfiniBand HCAs per node for compute (+2 for storage)", 8, (8, 200.0)),
    ("1600 Gbps node-node RoCE", 8, (8, 200.0)),
    ("400G NDR per GPU typical", 8, (8, 400.0)),
    ("400 Gb/s per GPU RDMA backend", 8, (8, 400.0)),
    ("inter-node Omni-Path (4 OPA links per node)", 8, (4, 100.0)),
    ("3.2 Tbps EFA per node", 8, (8, 400.0)),
    ("4 x 100 Gbps EDR", 8, (4, 100.0)),
    ("HDR InfiniBand", 4, (4, 200.0)),
    ("3200 Gbps EFA per node", 8, (8, 400.0)),
    ("InfiniBand NDR 400 Gbps", 8, (8, 400.0)),
    ("RoCE, 3200 Gbps", 8, (8, 400.0)),
    ("not stated (MosaicML platform)", 8, None),
    ("NVLink intra-node", 8, None),
    # NVLink and PCIe figures are never NICs (§5.223): the MLPerf systems files' texts
    ("18x 5th Gen NVLink, 14.4 TB/s aggregated bandwidth; scale-out InfiniBand; Data "
     "bandwidth for GPU-PCIe: 504 GB/s; PCIe-NIC: 500 GB/s (systems/hpg.dgxb200x8.n32.json)",
     8, None),
    ("NVLINK Gen4 900 GB/s + NVSWITCH Gen3 in the node; RoCE v2 Ethernet (NIC count and "
     "speed not stated in the systems file)", 8, None),
    ("GB200 NVL72: 72 GPUs in one NVLink domain (1.8 TB/s per GPU)", 4, None),
    ("NVLINK Gen5 1800 GB/s + NVSWITCH Gen5; scale-out 4x ConnectX-7 IB NDR 400Gb/s", 4,
     (4, 400.0)),
    ("8 GPUs per node on NVLink/NVSwitch (H800: 400 GB/s NVLink); 8x 400 Gb/s InfiniBand "
     "per node", 8, (8, 400.0)),
    ("NVLink 900 GB/s + 8x 400 Gb/s InfiniBand", 8, (8, 400.0)),
    ("8x 400 Gb/s ConnectX-7 on PCIe Gen5", 8, (8, 400.0)),
])
def test_interconnect_text_to_links(text, per, links):
    assert ri.parse_inter_node(text, per) == links


def test_model_families():
    llama = ri.model_family("Llama 3.1 70B")
    assert llama["activation"] == "swiglu" and llama["norm"] == "rmsnorm"
    assert llama["position_embedding"] == "rope" and not llama["tie_word_embeddings"]
    assert ri.model_family("Nemotron-4 340B")["activation"] == "squared_relu"
    assert ri.model_family("MPT-7b")["position_embedding"] == "alibi"
    assert not ri.model_family("MPT-7b")["bias"]
    gpt = ri.model_family("GPT-3 175B")
    assert gpt["activation"] == "gelu" and gpt["position_embedding"] == "learned" and gpt["bias"]
    assert ri.model_family("Qwen2 72B")["qkv_bias"]


@pytest.mark.parametrize("text,year,name", [
    ("google/maxtext", None, "jax-xla"),
    ("mosaicml/llm-foundry", None, "pytorch-eager"),
    ("pytorch/torchtitan arXiv:2410.06511", 2024, "torchtitan"),
    ("bigscience/Megatron-DeepSpeed", 2022, "megatron-deepspeed"),
    ("Narayanan et al. 2021 SC21", 2021, "megatron-lm-2021"),
    ("NVIDIA/dgxc-benchmarking NeMo 24.11", 2024, "nemo"),
    ("NVIDIA-NeMo/Megatron-Bridge v0.4.2", 2026, "nemo"),
    ("NVIDIA/dgxc-benchmarking", 2024, "megatron-core"),
    ("Megatron-LM README (Megatron-Core)", 2024, "megatron-core"),
    ("some paper", 2022, "megatron-lm-2021"),
    ("some paper", 2024, "megatron-core"),
])
def test_framework_from_source_text(text, year, name):
    assert ri.framework_name(text, year) == name


@pytest.mark.parametrize("value,kind", [
    (None, None), ("full", "full"), ("selective (op-level SAC)", "op"), ("SAC", "op"),
    ("selective", "selective"), ("sacrificial", "full"),
    ("none", "none"), ("false", "none"), ("activation checkpointing", "full"),
])
def test_recompute_words(value, kind):
    assert ri.recompute_kind(value) == kind


@pytest.mark.parametrize("value,kind", [
    ("interleaved 1F1B", "interleaved"), ("1F1B (PTD-P; interleaving not stated)", "1f1b"),
    ("non-interleaved", "1f1b"), ("GPipe", "gpipe"), ("no PP", ""), (None, ""),
])
def test_schedule_words(value, kind):
    assert ri.schedule_kind(value) == kind


def test_vocab_from_notes():
    assert ri.vocab_from_notes("Vocab ~250k (tr11 tokenizer)") == 250000
    assert ri.vocab_from_notes("a vocabulary of 50,257 tokens") == 50257
    assert ri.vocab_from_notes("nothing here") is None


def _entry(case_id: str) -> dict:
    return copy.deepcopy(next(e for e in load_reference() if e["id"] == case_id))


def test_mfu_only_entry_gives_the_step_that_mfu_implies():
    """An entry that prints only MFU: the step time is model FLOPs / (GPUs x peak x MFU)."""
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["measured"] = {"mfu": 0.5}
    e.pop("derived", None)
    case = case_from_entry(e)
    job = case.job
    want = model_flops_per_step(job.model, job.plan.gbs) / (128 * job.cluster.gpu.peak("bf16") * 0.5)
    assert case.measured_step_s == pytest.approx(want, rel=1e-12)
    assert "MFU" in case.how_measured


def test_export_parts_get_their_cut_nvlink():
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["hardware"].update(gpu="H800", interconnect="8x 400 Gb/s")
    job = case_from_entry(e).job
    assert job.cluster.gpu.name == "H800-SXM5-80GB"       # the catalog's H800 (hgx-h800)
    assert job.cluster.intra_node_bandwidth == 200e9
    assert ri.intra_node_gbps("H100-SXM5-80GB", "A800 80GB") == 200.0


def test_other_gpus_and_links_build_their_clusters():
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["hardware"].update(gpu="H200 141GB", interconnect="8x 400 Gb/s NDR")
    job = case_from_entry(e).job
    assert job.cluster.gpu.name == "H200-SXM-141GB"
    assert job.cluster.nics_per_node == 8 and job.cluster.inter_node_bandwidth == 400e9 / 8
    e["hardware"].update(gpu="Cerebras CS-2")
    case = case_from_entry(e)
    assert case.job is None and "hardware.gpu" in case.skipped


def test_fsdp_under_pipelining_is_zero2_and_data_parallel_only_plans_resolve():
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["plan"]["zero_stage"] = 3
    case = case_from_entry(e)
    assert case.job.plan.zero == 2 and any("zero=2" in a for a in case.assumptions)
    e = _entry("mosaic_mpt7b_h100ls_512gpu_seq2048_mb6")
    e["plan"].update(tp=None, pp=None)
    assert case_from_entry(e).job.plan.tp == 1


def test_every_shipped_case_resolves_or_says_why():
    for c in load_cases(tiers=None):
        assert (c.job is not None) != bool(c.skipped), c.id
        if c.job is not None:
            assert c.measured_step_s and c.measured_step_s > 0 and c.how_measured, c.id


def test_text_in_numeric_fields_is_refused_not_multiplied():
    """A string where a number belongs must never reach an arithmetic expression ('x' * a
    large int is a huge string, not an error)."""
    e = _entry("narayanan2021_t1_18.4B")
    e["model"]["layers"] = "x"
    e["plan"]["global_batch"] = 10**9
    case = case_from_entry(e)
    assert case.job is None and case.skipped
    e = _entry("narayanan2021_t1_18.4B")
    e["plan"].update(tp="8x", pp=10**12)
    with pytest.raises(SpecError):
        case_from_entry(e)
    e = _entry("mosaic_mpt7b_h100ls_512gpu_seq2048_mb6")
    e["measured"] = {"tokens_per_s_per_gpu": "fast", "tokens_per_s": "x"}
    e.pop("derived", None)
    assert case_from_entry(e).measured_step_s is None


@pytest.mark.slow
def test_fuzzed_reference_entries_never_crash():
    """Random wrong values in shipped entries: every one resolves or is skipped with a reason
    (the path ``paraplan validate --reference FILE`` takes)."""
    import random

    from simulator.studies.validate import _case, evaluate_case
    base = [e for e in load_reference() if e.get("kind") == "measured"]
    rng = random.Random(5)
    values = [None, "", "x", -1, 0, 1.5, [], {}, "8x", 10**12, True]
    for i in range(600):
        e = copy.deepcopy(rng.choice(base))
        sec = rng.choice(["model", "hardware", "plan", "measured", "source"])
        if isinstance(e.get(sec), dict) and e[sec]:
            e[sec][rng.choice([*e[sec], "extra"])] = rng.choice(values)
        case = _case(e, i)
        row = evaluate_case(case, simulate=False)
        assert (case.job is None) == (row["analytic_step_time_s"] is None)


def test_a_run_on_part_of_a_node_builds_that_many_gpus():
    e = _entry("torchtitan_2412_8B_t1_fsdp")
    e["hardware"]["n_gpus"] = 4
    e["plan"]["dp"] = 4
    job = case_from_entry(e).job
    assert job.cluster.num_gpus == 4 and job.plan.dp == 4


def test_mixture_of_experts_entries():
    """Expert count from the entry (or Mixtral's NxMB name, top-2) and ep from the plan."""
    e = _entry("dgxc_nemo2411_nemotron4_15B_bf16_16gpu")
    e["model"].update(name="Mixtral 8x7B", layers=32, hidden=4096, heads=32, kv_heads=8,
                      ffn_hidden=14336, vocab=32000, seq_len=4096)
    e["plan"].update(tp=1, pp=1, dp=16, ep=8, microbatch=1)
    case = case_from_entry(e)
    m, p = case.job.model, case.job.plan
    assert (m.num_experts, m.moe_router_topk, p.ep) == (8, 2, 8)
    assert any("top-2" in a for a in case.assumptions)
    e["model"].update(num_experts=16, top_k=4, name="DBRX")
    m = case_from_entry(e).job.model
    assert (m.num_experts, m.moe_router_topk) == (16, 4)


def test_virtual_stages_given_means_interleaved():
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["plan"].update(schedule="1F1B", virtual_stages=6)
    p = case_from_entry(e).job.plan
    assert (p.schedule, p.vpp) == ("interleaved", 6)


def test_uneven_layers_and_torchtitan_pipeline_micro_batches():
    """Llama 3.1 405B's 126 layers over pp=8 run as 8 stages of the busiest stage's 16 layers;
    torchtitan's local batch is split into pp micro-batches."""
    case = next(c for c in load_cases(tiers=(2,)) if c.id == "torchtitan_2412_405B_t6_cp1")
    job = case.job
    assert job.model.num_layers == 128 and job.plan.pp == 8
    assert job.plan.mbs == 1 and job.num_microbatches == 8 and job.plan.zero == 2
    assert any("126 -> 128" in a for a in case.assumptions)


def test_a_utilisation_is_read_with_the_models_own_layers():
    """Balancing an uneven split must not change the FLOPs an MFU is read with."""
    e = _entry("dgxc_nemo2411_gpt3_175B_bf16_128gpu")
    e["measured"] = {"mfu": 0.5}
    e.pop("derived", None)
    e["model"]["layers"] = 95                     # not a multiple of pp=8
    case = case_from_entry(e)
    assert case.job.model.num_layers == 96
    from dataclasses import replace
    own = replace(case.job.model, num_layers=95)
    want = model_flops_per_step(own, case.job.plan.gbs) / (128 * case.job.cluster.gpu.peak("bf16") * 0.5)
    assert case.measured_step_s == pytest.approx(want, rel=1e-12)

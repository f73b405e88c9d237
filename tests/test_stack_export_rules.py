"""A stack's limits live in its profile (``strategies.stacks.rules.stack_rules``): what an
exporter cannot express because the stack cannot run it is refused by the profile, so
``estimate --framework`` refuses it (exit 2, one line) and the search never proposes it.
Issue 15: "search never proposes what the stack cannot run"."""
from __future__ import annotations

import pytest

from simulator.cli.main import main
from strategies.export.maxtext import REMAT
from strategies.framework import PROFILES
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.pytorch import TORCHTITAN
from strategies.job import make_job
from strategies.launch import export
from strategies.plan import parse_plan
from strategies.presets import model_preset
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset


@pytest.mark.parametrize("fw, model, nodes, plan, field, words", [
    # torchtitan's DDP runs only alone (models/llama3/infra/parallelize.py)
    ("torchtitan", "llama3-8b", 2, "tp=2,mbs=1,gbs=64,zero=0", "zero", "sole parallelism"),
    ("torchtitan", "llama3-8b", 2, "pp=2,mbs=1,gbs=64,zero=0,schedule=1f1b", "zero",
     "sole parallelism"),
    # torchtitan's selective AC is op-level or per-layer, not Megatron's attention core
    ("torchtitan", "llama3-8b", 2, "mbs=1,gbs=64,zero=3,recompute=selective", "recompute",
     "recompute=op"),
    # expert parallelism carved from the FSDP ranks; etp is 1 or tp (parallel_dims.py)
    ("torchtitan", "mixtral-8x22b", 4, "tp=4,ep=4,etp=4,mbs=1,gbs=64,zero=0,cp=2", "ep",
     "carves expert parallelism"),
    ("torchtitan", "mixtral-8x22b", 4, "tp=4,ep=2,etp=2,mbs=1,gbs=64,zero=3", "etp",
     "1 or tp"),
    # MaxText's pipeline takes a multiple of the stages in micro-batches (configs/types.py)
    ("jax-xla", "llama3-8b", 1, "tp=2,pp=4,mbs=1,gbs=6,schedule=gpipe,recompute=full", "pp",
     "multiple of pp"),
    # MaxText's expert axis is a batch axis: ep divides dp
    ("jax-xla", "mixtral-8x22b", 4, "tp=1,cp=8,ep=8,mbs=1,gbs=64,zero=3", "ep",
     "ep must divide dp"),
])
def test_estimate_refuses_each_stack_rule(capsys, fw, model, nodes, plan, field, words):
    rc = main(["estimate", "--model", model, "--cluster", f"dgx-h100:{nodes}",
               "--framework", fw, "--plan", plan])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{field}=" in err and fw in err and words in err


@pytest.mark.parametrize("plan", ["tp=2,cp=2,mbs=1,gbs=64,zero=0",   # HSDP over the cp ranks
                                  "mbs=1,gbs=64,zero=0",              # DDP alone
                                  "tp=8,pp=2,mbs=1,gbs=64,zero=0"])   # no data parallelism
def test_torchtitan_runs_ddp_alone_hsdp_and_no_dp(plan):
    job = make_job(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), parse_plan(plan),
                   framework="torchtitan")
    export("torchtitan", job)


def test_profiles_recompute_modes_are_the_exporters():
    """MaxText's remat policies are the jax-xla profile's recompute modes, one each."""
    assert set(JAX_XLA.recompute) == set(REMAT)
    assert "selective" not in TORCHTITAN.recompute and "op" in TORCHTITAN.recompute


SPACES = [  # (model, nodes, gbs, options)
    ("llama3-8b", 2, 64, {}),
    ("llama3-8b", 4, 128, {"schedules": "all"}),
    ("mixtral-8x22b", 4, 64, {}),
    ("llama3-8b", 1, 12, {"max_bubble": 1.0}),    # micro-batch counts that are not 2^k
]


@pytest.mark.slow
@pytest.mark.parametrize("fw", ["torchtitan", "jax-xla", "pytorch-eager", "megatron-deepspeed"])
@pytest.mark.parametrize("model, nodes, gbs, opts", SPACES)
def test_search_space_holds_no_plan_the_exporter_refuses(fw, model, nodes, gbs, opts):
    """Every plan the search space keeps for a stack exports with that stack's launcher
    (megatron-deepspeed: its tp > 1 with pp > 1 plans, BLOOM's, were refused as DeepSpeed's
    AutoTP before its Megatron tensor parallelism was exported)."""
    prof = PROFILES[fw]
    m, cl = model_preset(model), cluster_preset("dgx-h100", nodes)
    space = enumerate_space(m, cl, gbs, SpaceOptions(**opts), framework=prof)
    refused = []
    for i in range(space.size):
        job = make_job(m, cl, space.plan(i), framework=prof)
        try:
            export(prof.export, job)
        except Exception as e:   # noqa: BLE001 - every refusal is a failure here
            refused.append(f"{space.plan(i).short()}: {e}")
    assert not refused, f"{len(refused)} of {space.size} refused, e.g. {refused[:3]}"


@pytest.mark.parametrize("fw", ["torchtitan", "jax-xla", "pytorch-eager"])
def test_group_microbatches_is_a_stack_rule(fw, capsys):
    """Every replica of these stacks takes the same batch: estimate --framework refuses a plan
    with per-group micro-batch counts, and the exporter refuses it by the same rule."""
    from strategies.errors import SpecError
    from topologies.cluster import parse_cluster_arg
    cl = parse_cluster_arg("dgx-a100:1+dgx-a100:1")
    plan = parse_plan("tp=1,mbs=1,zero=0,group_microbatches=1/1")
    with pytest.raises(SpecError, match="no group_microbatches") as e:
        make_job(model_preset("gpt-1.7b"), cl, plan, global_batch=16, framework=fw)
    assert e.value.field == "group_microbatches" and fw in str(e.value)
    job = make_job(model_preset("gpt-1.7b"), cl, plan, global_batch=16)
    with pytest.raises(SpecError, match="no group_microbatches") as e:
        export(PROFILES[fw].export, job)
    assert e.value.field == "--export"


def test_maxtext_space_keeps_only_whole_rounds_of_stages():
    """With micro-batch counts that are not powers of two (gbs 12 on 8 GPUs, any bubble), the
    jax-xla space keeps only plans whose micro-batches per step are a multiple of pp (without
    the profile's rule 14 of its plans were not, each refused by --export maxtext)."""
    space = enumerate_space(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), 12,
                            SpaceOptions(max_bubble=1.0), framework=JAX_XLA)
    c = space.cols
    m = c["gbs"] // (c["mbs"] * c["dp"])
    assert (c["pp"] > 1).any() and ((m % c["pp"])[c["pp"] > 1] == 0).all()

#!/usr/bin/env python
"""The lower bound against the simulated step on seeded random small mixed clusters
(docs/calibration.md §5.39): toy models, where a GEMM's fixed time makes the GPU type of the
lower peak the faster on small kernels, and uneven ``layers_per_stage``.

Run (about a minute on a quiet 2-core machine, every case simulated contention-free):

    python experiments/bound_mixed_gpus.py              # all four families, default counts
    python experiments/bound_mixed_gpus.py --family moe --cases 20
    python experiments/bound_mixed_gpus.py --arrays     # the search's arrays vs the scalar
    python experiments/bound_mixed_gpus.py --arrays --cost   # their profiled cost

For each family of cases: how many, how many bounds above the simulated step, the largest
bound/simulated ratio, and the median ratio of the even and of the uneven plans. Families:
``dense`` (one node of each of two GPU types, pp 1/2/4, GPipe or 1F1B, ``layers_per_stage``
on 60 % of the pipelined plans), ``spanning`` (one node of one type and three of the other,
so a stage can span both), ``schedules`` (interleaving, ZB-H1/H2, ZB-V, DualPipe(V)) and
``moe`` (8 experts, top 2, 0-2 dense first layers, ep 1/2/4). ``tests/test_bound_mixed_gpus.py``
runs the first cases of each generator. ``--arrays``: on three mixed search spaces, the
largest difference between the search's analytic step and the scalar estimate, for the plans
without pipelining and for the pipelined ones, and on the seeded even pipelined cases
(§5.39, §5.45); ``--arrays --cost``: cProfile of the mixed example's scoring.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.presets import model_preset  # noqa: E402
from topologies.cluster.arg import mixed_cluster  # noqa: E402

PAIRS = ("dgx-a100:1+dgx-h100:1", "dgx-h100:1+dgx-a100:1", "dgx-h100:1+dgx-b200:1",
         "dgx-b200:1+dgx-h100:1", "dgx-a100:1+dgx-b200:1", "dgx-b200:1+dgx-a100:1")
SPANNING = ("dgx-a100:1+dgx-h100:3", "dgx-h100:3+dgx-a100:1", "dgx-h100:1+dgx-b200:3",
            "dgx-b200:1+dgx-h100:3", "dgx-a100:3+dgx-b200:1", "dgx-h100:1+dgx-a100:3")


def toy(h: int = 256, layers: int = 8, seq: int = 256, vocab: int = 8192,
        base: str = "llama3-8b"):
    """A small model of ``base``'s kind: 8 heads, FFN 4h."""
    m = model_preset(base)
    return replace(m, name=f"toy-{h}", num_layers=layers, hidden_size=h, num_attention_heads=8,
                   num_query_groups=8 if m.num_query_groups else None, ffn_hidden_size=4 * h,
                   vocab_size=vocab, seq_length=seq)


def _random_toy(rng: random.Random):
    base = rng.choice(["llama3-8b", "gpt-1.7b"])
    h, layers = rng.choice([256, 512, 1024]), rng.choice([8, 12, 16])
    vocab, seq = rng.choice([8192, 32000]), rng.choice([256, 512, 1024])
    return toy(h, layers, seq, vocab, base)


def _split(rng: random.Random, layers: int, pp: int) -> str:
    cuts = sorted(rng.sample(range(1, layers), pp - 1))
    return "layers_per_stage=" + "/".join(str(b - a) for a, b in zip([0] + cuts,
                                                                   cuts + [layers]))


def _pipelined_text(rng: random.Random, parts: list, layers: int, pp: int,
                    schedules: list, p_split: float) -> str:
    """``parts`` joined as a plan, with (``pp > 1``) a schedule drawn from ``schedules`` and,
    with probability ``p_split``, an uneven split; ZeRO-1 with probability 0.3."""
    if pp > 1:
        parts.append(f"schedule={rng.choice(schedules)}")
        if rng.random() < p_split:
            parts.append(_split(rng, layers, pp))
    if rng.random() < 0.3:
        parts.append("zero=1")
    return ",".join(parts)


def dense_case(seed: int):
    """``(model, cluster, plan text)``: one node of each of two GPU types."""
    rng = random.Random(seed)
    m = _random_toy(rng)
    cl = mixed_cluster(rng.choice(PAIRS))
    pp = rng.choice([1, 2, 2, 4])
    tp = rng.choice([1, 2, 4]) if pp < 4 else rng.choice([1, 2])
    mbs = rng.choice([1, 2])
    gbs = rng.choice([8, 16]) * mbs * 16 // (tp * pp)
    parts = [f"tp={tp}", f"pp={pp}", f"mbs={mbs}", f"gbs={gbs}"]
    return m, cl, _pipelined_text(rng, parts, m.num_layers, pp, ["1f1b", "gpipe", "1f1b"], 0.6)


def spanning_case(seed: int):
    """One node of one type and three of the other: a stage may span both."""
    rng = random.Random(1000 + seed)
    m = _random_toy(rng)
    cl = mixed_cluster(rng.choice(SPANNING))
    pp, tp, mbs = rng.choice([2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2])
    gbs = rng.choice([2, 4]) * mbs * (32 // (tp * pp))
    parts = [f"tp={tp}", f"pp={pp}", f"mbs={mbs}", f"gbs={gbs}",
             f"schedule={rng.choice(['1f1b', 'gpipe'])}"]
    if rng.random() < 0.5:
        parts.append(_split(rng, m.num_layers, pp))
    return m, cl, ",".join(parts)


def schedules_case(seed: int):
    """Interleaving, the zero-bubble schedules or DualPipe(V)."""
    rng = random.Random(5000 + seed)
    m = toy(rng.choice([256, 512]), 8, rng.choice([256, 512]))
    sched = rng.choice(["interleaved", "zb-h1", "zb-h2", "dualpipe", "zb-v", "dualpipev"])
    pp, tp = rng.choice([2, 4]), rng.choice([1, 2])
    plan = f"tp={tp},pp={pp},mbs=1,gbs={rng.choice([2, 4]) * 16 // tp},schedule={sched}"
    plan += ",vpp=2" if sched == "interleaved" else ""
    plan += ",zero=1" if rng.random() < 0.3 else ""
    return m, mixed_cluster(rng.choice(PAIRS)), plan


def toy_moe(rng: random.Random, dense: tuple = (0, 1, 2), mtp: tuple = ()):
    """A seeded toy mixture of experts (Qwen3's or Mixtral's layer, 8 experts, top 2, 8 or 12
    layers, ``dense`` the choices of dense first layers, ``mtp`` of MTP modules: none drawn
    when empty), drawing from ``rng`` in a fixed order."""
    base = model_preset(rng.choice(["qwen3-30b-a3b", "mixtral-8x7b"]))
    h = rng.choice([256, 512])
    return replace(base, name="toy-moe", num_layers=rng.choice([8, 12]), hidden_size=h,
                   num_attention_heads=8, num_query_groups=4,
                   kv_channels=None if base.kv_channels is None else 64, ffn_hidden_size=4 * h,
                   moe_ffn_hidden_size=rng.choice([128, 256, 512]), num_experts=8,
                   moe_router_topk=2, vocab_size=8192, seq_length=rng.choice([256, 512]),
                   first_k_dense_replace=rng.choice(list(dense)),
                   **({"num_nextn_predict_layers": rng.choice(list(mtp))} if mtp else {}))


def moe_case(seed: int):
    """A toy mixture of experts (8 experts, top 2; 0-2 dense first layers)."""
    rng = random.Random(9000 + seed)
    m = toy_moe(rng, dense=(0, 1, 2))
    cl = mixed_cluster(rng.choice(PAIRS))
    pp, ep, tp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2])
    parts = [f"tp={tp}", f"pp={pp}", f"ep={ep}", "mbs=1",
             f"gbs={rng.choice([4, 8]) * (16 // (tp * pp))}"]
    return m, cl, _pipelined_text(rng, parts, m.num_layers, pp, ["1f1b", "gpipe", "zb-h1"], 0.5)


FAMILIES = {"dense": (dense_case, 230), "spanning": (spanning_case, 40),
            "schedules": (schedules_case, 60), "moe": (moe_case, 60)}


def bound_and_sim(m, cl, plan: str) -> tuple[float, float]:
    """The lower bound and the contention-free simulated step of one plan (seconds)."""
    from simulator.simulate import simulate
    from strategies.estimate.lower_bound import step_time_lower_bound
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.plan_arrays import PlanArrays
    job = make_job(m, cl, parse_plan(plan))
    (b,) = step_time_lower_bound(m, cl, job.dtype, PlanArrays.from_plans([job.plan]),
                                 job.framework)
    return float(b), simulate(job, network="contention-free").step_time_s


ARRAY_SPACES = (("toy", "dgx-h100:1+dgx-a100:1"), ("toy", "dgx-b200:1+dgx-h100:1"),
                ("gpt-1.7b", "dgx-h100:1+dgx-a100:1"))


def arrays_vs_scalar(model: str, cluster: str, rows: int = 80) -> tuple[float, float]:
    """The largest relative difference between the search's analytic step (the arrays) and
    the scalar estimate over about ``rows`` evenly spaced plans of the search space of
    ``model`` on ``cluster`` at global batch 64: ``(without pipelining, pipelined)``."""
    from strategies.estimate.scalar import estimate
    from strategies.job import make_job
    from strategies.search.space import SpaceOptions, enumerate_space
    try:
        from strategies.estimate.mixed import estimate_arrays_mixed as arrays
    except ImportError:             # (before the mixed arrays: the plain ones)
        from strategies.estimate.analytic import estimate_arrays as arrays
    m = toy() if model == "toy" else model_preset(model)
    cl = mixed_cluster(cluster)
    sp = enumerate_space(m, cl, 64, SpaceOptions())
    a = arrays(m, cl, "bf16", sp.arrays)
    worst = [0.0, 0.0]
    for i in range(0, sp.size, max(1, sp.size // rows)):
        p = sp.plan(i)
        e = estimate(make_job(m, cl, p)).step_time_s
        k = int(p.pp > 1)
        worst[k] = max(worst[k], abs(float(a["step_time_s"][i]) / e - 1))
    return worst[0], worst[1]


def even_pipelined_jobs(gen, count: int):
    """``(model, cluster, job)`` of the even pipelined plans among ``gen``'s first ``count``
    seeded cases (``layers_per_stage`` plans, MoE toys with dense first layers and plans a
    rule refuses left out)."""
    from strategies.errors import SpecError
    from strategies.job import make_job
    from strategies.plan import parse_plan
    for seed in range(count):
        m, cl, plan = gen(seed)
        if "layers_per_stage" in plan or getattr(m, "first_k_dense_replace", 0):
            continue
        try:
            job = make_job(m, cl, parse_plan(plan))
        except SpecError:
            continue
        if job.plan.pp > 1:
            yield m, cl, job


def arrays_cases() -> dict[tuple[str, str], list]:
    """The even pipelined plans among the seeded cases of each family (``layers_per_stage``
    plans and MoE toys with dense first layers apart: the arrays keep the even run there):
    ``{(family, schedule): [cases, largest |plain arrays/scalar - 1|, largest
    |estimate_arrays_mixed/scalar - 1|]}``, the plain arrays being every stage on
    ``Cluster.gpu`` with even work (what the search scored them with before §5.45)."""
    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.mixed import estimate_arrays_mixed
    from strategies.estimate.scalar import estimate
    from strategies.plan_arrays import PlanArrays
    out: dict[tuple[str, str], list] = {}
    for name, (gen, count) in FAMILIES.items():
        for m, cl, job in even_pipelined_jobs(gen, count):
            P = PlanArrays.from_plans([job.plan])
            e = estimate(job).step_time_s
            row = out.setdefault((name, job.plan.schedule), [0, 0.0, 0.0])
            row[0] += 1
            for k, f in ((1, estimate_arrays), (2, estimate_arrays_mixed)):
                a = float(f(m, cl, job.dtype, P, job.framework)["step_time_s"][0])
                row[k] = max(row[k], abs(a / e - 1))
    return out


def arrays_cost() -> None:
    """The search's scoring of the mixed example space (Llama 3 8B, 32 H100 + 32 A100, batch
    256): cProfile function calls and time of ``estimate_arrays_mixed`` against the plain
    ``estimate_arrays`` in the same process, the first call (the schedules' orders built)
    and a second (cached)."""
    import cProfile
    import pstats
    import time

    from strategies.estimate.analytic import estimate_arrays
    from strategies.estimate.mixed import estimate_arrays_mixed
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import parse_cluster_arg
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    m = model_preset("llama3-8b")
    cl = parse_cluster_arg(os.path.join(root, "docs/examples/mixed-h100-a100.yaml"))
    sp = enumerate_space(m, cl, 256, SpaceOptions())
    print(f"{sp.size} plans, {int((sp.arrays.pp > 1).sum())} pipelined")
    for run in ("first", "second"):
        t = time.perf_counter()
        estimate_arrays(m, cl, "bf16", sp.arrays)
        plain = time.perf_counter() - t
        pr = cProfile.Profile()
        t = time.perf_counter()
        pr.enable()
        estimate_arrays_mixed(m, cl, "bf16", sp.arrays)
        pr.disable()
        mixed = time.perf_counter() - t
        print(f"{run} call: {pstats.Stats(pr).total_calls} function calls, "
              f"{mixed / plain:.1f}x the plain arrays' time (profiled)")


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from strategies.errors import SpecError
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), action="append")
    ap.add_argument("--cases", type=int, help="cases per family (default: each family's)")
    ap.add_argument("--verbose", action="store_true", help="one line per case")
    ap.add_argument("--arrays", action="store_true",
                    help="the search's arrays against the scalar estimate instead")
    ap.add_argument("--cost", action="store_true",
                    help="with --arrays: the profiled cost of the mixed example's scores")
    a = ap.parse_args(argv)
    if a.arrays and a.cost:
        arrays_cost()
        return 0
    if a.arrays:
        print("| model | cluster | largest |arrays/scalar - 1|, pp 1 | pipelined |")
        print("| --- | --- | ---: | ---: |")
        for model, cluster in ARRAY_SPACES:
            one, piped = arrays_vs_scalar(model, cluster)
            print(f"| {model} | {cluster} | {one:.2e} | {piped:.2e} |")
        print()
        print("| family | schedule | even pipelined cases | plain arrays | mixed arrays |")
        print("| --- | --- | ---: | ---: | ---: |")
        for (fam, sched), (n, plain, mixed) in sorted(arrays_cases().items()):
            print(f"| {fam} | {sched} | {n} | {plain:.3f} | {mixed:.2e} |")
        return 0
    print("| family | cases | bound > simulated | largest ratio | median even | median uneven |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in a.family or list(FAMILIES):
        gen, count = FAMILIES[name]
        even, uneven, above = [], [], 0
        for seed in range(a.cases or count):
            m, cl, plan = gen(seed)
            try:
                b, t = bound_and_sim(m, cl, plan)
            except SpecError:          # a plan the cluster cannot run (expert groups, layers)
                continue
            (uneven if "layers_per_stage" in plan else even).append(b / t)
            above += b > t
            if a.verbose:
                print(f"{name} {seed} {cl.name} {m.name} L{m.num_layers} {plan} "
                      f"{b:.6e} {t:.6e} {b / t:.4f}", file=sys.stderr)
        ratios = even + uneven

        def med(x):
            return f"{np.median(x):.3f}" if x else "-"
        print(f"| {name} | {len(ratios)} | {above} | {max(ratios):.4f} | {med(even)} | "
              f"{med(uneven)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

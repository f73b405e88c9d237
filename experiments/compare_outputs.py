"""Compare what this checkout's simulator produces with another checkout's, content for content.

A change of the event engine that reorders events at equal times (issue 17: one queue entry
for many events) must leave every result the same: each plan below is simulated by both
checkouts and compared on the step time, the records (as a sorted list: the order in which
ops at one instant are recorded may change, each stream's own order may not), the metrics
(JSON with sorted keys: link utilisation and its series, activation memory, breakdown,
bubbles), ``simulate --json`` without ``events`` and ``wall_s``, and the Chrome trace's events
(sorted). ``SimResult.events`` (the SimPy queue entries) is printed, not compared. ``--big``
also compares the unfolded GPT-3 175B / 1,024-GPU step (a hash of its sorted records and of
its metrics). ``--deepseek GBS`` also compares DeepSeek-V3 on 2,048 H800 under DualPipe
(``report_deepseek.py``'s job at GBS sequences, with the link series the CLI's ``simulate``
records: hashes of its records in order, metrics, JSON and sorted Chrome trace events). Each
checkout runs in its own process. Prints one line per plan; exits 1 when a plan differs.

    git archive 9e4c414 | tar -x -C /tmp/before
    python experiments/compare_outputs.py --tree /tmp/before
    python experiments/compare_outputs.py --tree /tmp/before --big
    python experiments/compare_outputs.py --tree /tmp/before --deepseek 4096
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (model, cluster preset, nodes, plan, simulate keywords): 1F1B, interleaved, ZB-V, DualPipeV,
# GPipe, DeepSpeed's blocking sends, MoE folded / unfolded / contention-free, a 12-rank data-
# parallel ring that contends, CP by layer, ZeRO-1 and -3, recompute with SP, instant comm
PLANS = [
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=2,gbs=64", {}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=2,gbs=64", {"fold": False}),
    ("llama3-8b", "dgx-h100", 4, "tp=4,pp=2,zero=1,gbs=64", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=1,pp=4,gbs=64,schedule=interleaved,vpp=2", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=1,pp=4,gbs=64,schedule=interleaved,vpp=2", {}),
    ("gpt-1.7b", "dgx-a100", 2, "tp=1,pp=4,gbs=32,schedule=zb-v", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 2, "tp=1,pp=4,gbs=32,schedule=dualpipev", {"fold": False}),
    ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=2,ep=4,gbs=32", {}),
    ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=2,ep=4,gbs=32", {"fold": False}),
    ("mixtral-8x7b", "dgx-h100", 2, "tp=2,pp=2,ep=4,gbs=32",
     {"fold": False, "network": "contention-free"}),
    ("gpt-1.7b", "dgx-a100", 3, "tp=1,pp=2,dp=12,gbs=48", {}),
    ("gpt-1.7b", "dgx-a100", 3, "tp=1,pp=2,dp=12,gbs=48", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 2, "tp=2,pp=1,cp=2,gbs=16", {"fold": False, "granularity": "layer"}),
    ("llama3-8b", "dgx-h100", 2, "tp=2,pp=1,zero=3,gbs=32", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=2,gbs=64,recompute=full,sp=true", {"fold": False}),
    ("llama3-8b", "dgx-h100", 1, "tp=2,pp=2,mbs=1,gbs=32,schedule=gpipe", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=4,gbs=64,schedule=deepspeed-1f1b", {"fold": False}),
    ("gpt-1.7b", "dgx-a100", 4, "tp=2,pp=4,gbs=64", {"fold": False, "free_comm": True}),
]
KEYS = ("step", "records", "metrics", "json", "trace")


def _digest(res, job) -> dict:
    """What one simulation produced, in a form that does not depend on the order of events
    at equal times."""
    from simulator.output.chrome_trace import to_chrome_trace
    from simulator.simulate import to_json
    out = to_json(res, job)
    out.pop("wall_s")
    out.pop("events")
    trace = to_chrome_trace(res)
    return {"step": res.step_time_s, "events": res.events, "records": sorted(res.records),
            "metrics": json.dumps(res.metrics, sort_keys=True, default=repr),
            "json": json.dumps(out, sort_keys=True, default=repr),
            "trace": sorted(json.dumps(e, sort_keys=True) for e in trace["traceEvents"])}


def _hash(x) -> str:
    return hashlib.sha256(x.encode() if isinstance(x, str) else repr(x).encode()).hexdigest()


def _inner(tree: str, out: str, big: bool, deepseek: int = 0) -> None:
    sys.path.insert(0, tree)
    sys.path.insert(0, str(Path(tree) / "experiments"))
    from simulator.simulate import simulate
    from strategies.job import make_job
    from strategies.plan import parse_plan
    from strategies.presets import model_preset
    from topologies.cluster import cluster_preset
    rows = []
    for model, cluster, nodes, plan, kw in PLANS:
        job = make_job(model_preset(model), cluster_preset(cluster, nodes), parse_plan(plan))
        res = simulate(job, link_series=kw.get("network", "flows") == "flows", **kw)
        rows.append(_digest(res, job))
    if big:
        from bench_simulate import make
        job, fold = make("175b-full")
        res = simulate(job, fold=fold)
        rows.append({"step": res.step_time_s, "events": res.events,
                     "records": hashlib.sha256(repr(sorted(res.records)).encode()).hexdigest(),
                     "metrics": hashlib.sha256(json.dumps(res.metrics, sort_keys=True,
                                                          default=repr).encode()).hexdigest(),
                     "json": "", "trace": ""})
    if deepseek:
        from report_deepseek import job_of, padded_model, reference_plan
        from strategies.hf_config import load_model_arg
        model, _ = padded_model(load_model_arg("deepseek-v3"), 16)
        job = job_of(model, "hgx-h800:256", reference_plan(), "dualpipe", deepseek,
                     "fp8-blockwise", "hai-llm")
        res = simulate(job, link_series=True)
        d = _digest(res, job)
        rows.append({"step": d["step"], "events": d["events"], "records": _hash(res.records),
                     "metrics": _hash(d["metrics"]), "json": _hash(d["json"]),
                     "trace": _hash("\n".join(d["trace"]))})
    with open(out, "wb") as f:
        pickle.dump(rows, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", required=True, help="the other checkout (git archive | tar -x)")
    ap.add_argument("--big", action="store_true", help="also the unfolded 175B / 1,024-GPU step")
    ap.add_argument("--deepseek", type=int, default=0, metavar="GBS",
                    help="also DeepSeek-V3 on 2,048 H800, DualPipe, at GBS sequences")
    ap.add_argument("--inner", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        _inner(a.inner[0], a.inner[1], a.big, a.deepseek)
        return
    if not (Path(a.tree) / "simulator").is_dir():
        ap.error(f"--tree {a.tree!r}: not a checkout (no simulator/ in it)")
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, tree in enumerate((a.tree, str(ROOT))):
            out = str(Path(tmp) / f"{n}.pkl")
            subprocess.run([sys.executable, __file__, "--tree", a.tree, "--inner", tree, out]
                           + (["--big"] if a.big else [])
                           + (["--deepseek", str(a.deepseek)] if a.deepseek else []), check=True)
            with open(out, "rb") as f:
                got.append(pickle.load(f))
    names = [f"{m} {c}:{n} {p} {kw}" for m, c, n, p, kw in PLANS] + (
        ["175b-full"] if a.big else []) + ([f"deepseek-v3 dualpipe gbs {a.deepseek} "
                                            "(records in order)"] if a.deepseek else [])
    same = True
    for name, x, y in zip(names, *got):
        diff = [k for k in KEYS if x[k] != y[k]]
        same &= not diff
        print(f"{name}: events {x['events']:,} -> {y['events']:,}, "
              + ("identical" if not diff else f"DIFFERS in {', '.join(diff)}"))
    print("all identical" if same else "DIFFERENCES")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()

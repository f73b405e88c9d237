"""``paraplan goodput``: expected wall time, goodput and GPU-hours of a training run under
failures (``strategies.goodput``; docs/goodput.md)."""
from __future__ import annotations

import argparse
from typing import Any

from simulator.cli.common import (CliError, Once, add_json, add_model_cluster, check_dtype,
                                  check_output, emit_json, fmt_s, positive_int, resolve_cluster,
                                  resolve_framework, resolve_job, resolve_model, table)
from strategies import goodput as gp
from strategies.errors import SpecError
from strategies.plan import parse_plan
from topologies.limits import parse_int_text

MAX_TOKENS = 10 ** 18


def _number(field: str):
    """An argparse type that keeps any number: the range check (``> 0``) is the library's,
    so the error names the field, the value and the rule, with exit status 2."""
    def conv(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid value {text[:60]!r}: must be a number") \
                from None
    conv.__name__ = "number"
    return conv


def register(sub) -> None:
    p = sub.add_parser("goodput", help="expected goodput, wall time and GPU-hours under failures",
                       description="Time per step from simulate (or the estimate), failures "
                       "from per-GPU and per-node MTBF, checkpoints from the memory model: "
                       "the Young/Daly interval, goodput and the cost of N tokens.")
    add_model_cluster(p)
    p.add_argument("--plan", action=Once, default=None, metavar="P",
                   help="key=value,... or a YAML/JSON file, as estimate's --plan (default: the "
                        "plan a search recommends, "
                        "which needs --global-batch)")
    p.add_argument("--tokens", required=True, action=Once, metavar="N",
                   help="tokens to train (integer; 15e12 style is accepted)")
    p.add_argument("--mtbf-gpu-h", action=Once, type=_number("--mtbf-gpu-h"),
                   default=gp.DEFAULT_MTBF_GPU_H, metavar="H",
                   help=f"hours between failures of one GPU (default {gp.DEFAULT_MTBF_GPU_H:,.0f}, "
                        "Llama 3)")
    p.add_argument("--mtbf-node-h", action=Once, type=_number("--mtbf-node-h"),
                   default=gp.DEFAULT_MTBF_NODE_H, metavar="H",
                   help=f"hours between other failures of one node (default "
                        f"{gp.DEFAULT_MTBF_NODE_H:,.0f}, Llama 3)")
    p.add_argument("--ckpt-bw", action=Once, type=_number("--ckpt-bw"), default=None,
                   metavar="GBPS", help="checkpoint write bandwidth of the job, GB/s (default: "
                   "the cluster file's storage_write_GBps, else "
                   f"{gp.DEFAULT_CKPT_BW_PER_GPU / 1e9:.3f} GB/s per GPU, Llama 3's storage)")
    p.add_argument("--restart-s", action=Once, type=_number("--restart-s"),
                   default=gp.DEFAULT_RESTART_S, metavar="S",
                   help=f"seconds to restart after a failure (default {gp.DEFAULT_RESTART_S:g})")
    p.add_argument("--interval-s", action=Once, type=_number("--interval-s"), default=None,
                   metavar="S", help="checkpoint every S seconds of compute (default: Daly)")
    p.add_argument("--analytic", action="store_true",
                   help="time a step with the analytic estimate instead of simulating it")
    p.add_argument("--monte-carlo", action=Once, type=positive_int("--monte-carlo", 1_000_000),
                   default=None, metavar="N", help="also sample N runs of failures")
    p.add_argument("--seed", action=Once, type=positive_int("--seed", 2**63 - 1, lo=0),
                   default=None, metavar="S",
                   help="seed of the Monte-Carlo sampler (default 0; needs --monte-carlo)")
    p.add_argument("--plot", action=Once, default=None, metavar="F.png",
                   help="draw the Monte-Carlo distribution of the wall time (.png or .svg; "
                        "needs --monte-carlo)")
    add_json(p)
    p.set_defaults(func=run)


def parse_tokens(text: str) -> int:
    """An integer count of tokens; ``15e12`` is read exactly when it is a whole number."""
    s = str(text).strip()
    try:
        n = parse_int_text("--tokens", s)
    except SpecError:   # not plain digits: try the scientific form
        try:
            f = float(s)
        except ValueError:
            raise CliError("--tokens", text, "must be a positive integer (e.g. 15000000000000 "
                           "or 15e12)") from None
        if not f.is_integer():
            raise CliError("--tokens", text, "must be a whole number of tokens") from None
        n = int(f)
    if not 1 <= n <= MAX_TOKENS:
        raise CliError("--tokens", text, f"must be an integer in 1..{MAX_TOKENS:.0e}")
    return n


def _check_positive(flag: str, v: float | None) -> None:
    if v is not None and not (v > 0 and v != float("inf")):
        raise CliError(flag, v, "must be a finite number > 0")


def step_time(job, analytic: bool) -> tuple[float, str]:
    """Seconds per step and how it was obtained."""
    if analytic:
        from strategies.estimate.scalar import estimate
        return estimate(job).step_time_s, "analytic estimate"
    from simulator.simulate import simulate
    return simulate(job).step_time_s, "simulated"


def recommended(args: argparse.Namespace):
    """The job of the plan a default ``search`` recommends, and its simulated step time."""
    from simulator.search.run import SearchConfig, run_search
    from strategies.job import make_job
    if args.global_batch is None:
        raise CliError("--global-batch", None, "is required without --plan (the search needs "
                                               "the global batch)")
    model, cluster = resolve_model(args), resolve_cluster(args)
    framework = resolve_framework(args)
    rep = run_search(SearchConfig(model=model, cluster=cluster, gbs=args.global_batch,
                                  dtype=check_dtype(args.dtype), framework=framework))
    rec = rep["recommended"]
    job = make_job(model, cluster, parse_plan(rec["key"]), dtype=args.dtype, framework=framework)
    return job, rec["step_time_s"], "simulated, the plan a search recommends"


def run(args: argparse.Namespace) -> int:
    tokens = parse_tokens(args.tokens)
    check_output(args.plot, "--plot", (".png", ".svg"))
    if args.plot and not args.monte_carlo:
        raise CliError("--plot", args.plot, "needs --monte-carlo N (it draws the sampled runs)")
    if args.seed is not None and not args.monte_carlo:
        raise CliError("--seed", args.seed, "needs --monte-carlo N (it seeds the sampled runs)")
    seed = 0 if args.seed is None else args.seed
    for flag, v in (("--mtbf-gpu-h", args.mtbf_gpu_h), ("--mtbf-node-h", args.mtbf_node_h),
                    ("--ckpt-bw", args.ckpt_bw), ("--interval-s", args.interval_s)):
        _check_positive(flag, v)
    if not (args.restart_s >= 0 and args.restart_s != float("inf")):
        raise CliError("--restart-s", args.restart_s, "must be a finite number >= 0")
    if args.plan is None:
        job, step, how = recommended(args)
    else:
        job = resolve_job(args)
        step, how = step_time(job, args.analytic)
    cl = job.cluster
    rep = gp.goodput_report(
        step, tokens, job.tokens_per_step, cl.num_gpus, cl.num_nodes,
        gp.checkpoint_bytes(job.model, job.framework, job.system),
        mtbf_gpu_h=args.mtbf_gpu_h,
        mtbf_node_h=args.mtbf_node_h,
        ckpt_bw=args.ckpt_bw * 1e9 if args.ckpt_bw is not None else cl.storage_write_bandwidth,
        restart_s=args.restart_s,
        interval_s=args.interval_s)
    out: dict[str, Any] = {"step_time_source": how, "tokens": tokens, **rep.to_json(),
                           "mtbf_gpu_h": args.mtbf_gpu_h, "mtbf_node_h": args.mtbf_node_h,
                           "inputs": job.to_dict()}
    if args.monte_carlo:
        walls = gp.sample_run_s(rep.compute_s, rep.checkpoint_interval_s, rep.checkpoint_write_s,
                                rep.job_mtbf_s, rep.restart_s, args.monte_carlo, seed)
        out["monte_carlo"] = {"seed": seed,
                              **gp.summarize_samples(walls, rep.compute_s)}
        if args.plot:
            draw(walls, rep, args.plot, f"{job.model.name} on {job.cluster.name}, "
                                        f"{job.plan.short()}")
    if args.json:
        emit_json(out)
    else:
        print(render(out, job))
    return 0


def draw(walls, rep: gp.GoodputReport, path: str, title: str) -> None:
    """Histogram of the sampled wall times (days) with the closed-form expectation."""
    from simulator.output.figures import new_figure, save_figure
    fig, ax = new_figure((6.4, 3.6))
    ax.hist(walls / 86400.0, bins=40, color="#4C72B0", alpha=0.85)
    ax.axvline(rep.expected_wall_s / 86400.0, color="#C44E52", lw=2,
               label=f"closed form {rep.expected_wall_s / 86400.0:,.2f} days")
    ax.axvline(rep.compute_s / 86400.0, color="0.3", ls="--",
               label=f"no failures {rep.compute_s / 86400.0:,.2f} days")
    ax.set_xlabel("wall time (days)")
    ax.set_ylabel(f"runs of {walls.size:,}")
    ax.set_title(f"{title}: goodput {100 * rep.goodput_fraction:.1f} %", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def _days(s: float) -> str:
    return f"{s / 86400:,.2f} days" if s >= 86400 else fmt_s(s) if s < 3600 else \
        f"{s / 3600:,.2f} h"


def render(out: dict[str, Any], job) -> str:
    cl = job.cluster
    lines = [f"Goodput: {job.model.name} on {cl.name} ({cl.describe_gpus()}), "
             f"plan {job.plan.short()}, {out['tokens']:,} tokens", ""]
    rows = [
        ["step time", f"{fmt_s(out['step_time_s'])} ({out['step_time_source']})"],
        ["steps / compute", f"{out['steps']:,} / {_days(out['compute_s'])}"],
        ["job MTBF", _days(out["job_mtbf_s"])],
        ["checkpoint", f"{out['checkpoint_bytes'] / 1e12:.3f} TB at "
                       f"{out['checkpoint_bw'] / 1e9:.1f} GB/s: {fmt_s(out['checkpoint_write_s'])}"],
        ["interval (Daly)", f"{_days(out['checkpoint_interval_s'])} "
                            f"(Young {_days(out['young_interval_s'])})"],
        ["lost per failure", f"{_days(out['expected_lost_work_s'])} + restart "
                             f"{fmt_s(out['restart_s'])}"],
        ["failures", f"{out['expected_failures']:,.1f} expected"],
        ["goodput", f"{100 * out['goodput_fraction']:.2f} %"],
        ["wall time", _days(out["expected_wall_s"])],
        ["GPU-hours", f"{out['expected_gpu_hours']:,.0f}"],
    ]
    lines.append(table(["quantity", "value"], rows, "ll"))
    mc = out.get("monte_carlo")
    if mc:
        lo, hi = mc["ci95_wall_s"]
        lines += ["", f"Monte-Carlo, {mc['runs']:,} runs (seed {mc['seed']}): mean wall "
                      f"{_days(mc['mean_wall_s'])} (95 % CI {_days(lo)} .. {_days(hi)}), "
                      f"p5 {_days(mc['p5_wall_s'])}, p95 {_days(mc['p95_wall_s'])}"]
        h = mc["histogram"]
        top = max(h["counts"]) or 1
        for c, a, b in zip(h["counts"], h["edges_s"][:-1], h["edges_s"][1:]):
            lines.append(f"  {_days(a):>14} .. {_days(b):>14}  {'#' * round(40 * c / top):<40} {c}")
    return "\n".join(lines)

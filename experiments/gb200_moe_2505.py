#!/usr/bin/env python
"""What is GB200-specific in NeMo 25.04.01's MoE runs on GB200 NVL72 (DGX Cloud 25.05), and
what each GB200-only candidate would add per MoE layer and micro-batch
(docs/calibration.md §5.83). Analytic only, deterministic, a few seconds:

    python experiments/gb200_moe_2505.py            # Markdown tables on stdout

Table 1, per row: the container and whether the run captured CUDA graphs (from the row's notes
and the recipes §5.44/§5.57 read), the layout, the time the estimate misses per MoE layer and
micro-batch on the busiest rank (``M``, ``experiments/moe_residuals.py``'s measure), the
model's own MoE layer (forward + backward, ``G``), the measured time per layer and
micro-batch over all the rank's layers (``T``), and the model's expert all-to-all of one MoE
layer and micro-batch (forward + backward: four all-to-alls, ``A``, each alone on its links,
``strategies.cost.comm.collective_time`` as the estimate calls it), its bytes on the wire per
GPU (``W``, ``(ep-1)/ep`` of the buffers), the rate that gives (``W/A``) and the rate at
which the miss would be all all-to-all (``W/(A+M)``).

Table 2, per candidate (the brief's list), its figure per MoE layer and micro-batch on the
GB200 Maverick and DeepSeek-V3 rows and on the control rows that fit, from the model's own
terms and the public measurement named:

* the Grace host (TE issue #2053: a ``Linear`` forward's host path 37.08 µs on GB200 against
  13.48 µs on an H100 DGX's Xeon 8480C, ``GRACE_HOST_RATIO``) applied to the host terms the
  model has on these rows (the dispatcher sync's host path, ``moe_time.moe_sync_time``);
* the host-bound reading: how many such host paths the miss equals (``M`` / 37.08 µs);
* the drop-and-pad dispatcher's sync, which does not run and which the model charges these
  padded rows no more (``moe_sync_time`` with the plan's ``moe_pad_to_capacity``, §5.125);
* the all-to-all rate (``W/(A+M)`` against the rows that ran the same dispatcher on GB200 and
  fit);
* the tray what-if of table 3.

Table 3, a what-if only (not in the model): every GB200 row of the reference files estimated
once as it is and once on the same cluster with each 4-GPU tray its own NVLink domain
(``tray_cluster``: ``gpus_per_node`` = ``nvlink_domain_gpus`` = 4, one 400 Gb/s NIC per GPU as
the preset has), i.e. as if every collective and all-to-all between trays had crossed the
trays' NICs instead of multi-node NVLink. The container of each row is read from its source
fields (``container_of``).
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost import moe_bytes  # noqa: E402
from strategies.cost.moe_time import moe_sync_time  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate import estimate  # noqa: E402
from strategies.launch_blocking import HOST_PATH_S  # noqa: E402
from strategies.plan import DISPATCHERS  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402
from topologies.cluster import Cluster  # noqa: E402

DATA = "strategies/reference/data/"
#: (file, row id, container, CUDA graphs as the recipe ran them, source of the graphs fact)
ROWS = (
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_128_bf16", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_256_bf16", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_512_bf16", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_128_fp8", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_256_fp8", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_llama4_400b_gb200_512_fp8", "25.04.01", "off", "§5.57 csv"),
    ("dgxc_2505", "dgxc2505_deepseek_v3_671b_gb200_128_bf16", "25.04.01", "off", "§5.44 csv"),
    ("dgxc_2505", "dgxc2505_deepseek_v3_671b_gb200_256_bf16", "25.04.01", "off", "§5.44 csv"),
    ("dgxc_2505", "dgxc2505_deepseek_v3_671b_gb200_512_bf16", "25.04.01", "off", "§5.44 csv"),
    ("dgxc_2505", "dgxc2505_grok1_314b_gb200_128_bf16", "25.04.00", "on", "row notes"),
    ("dgxc_2505", "dgxc2505_grok1_314b_gb200_256_bf16", "25.04.00", "on", "row notes"),
    ("dgxc_2505", "dgxc2505_grok1_314b_gb200_128_fp8", "25.04.00", "on", "row notes"),
    ("dgxc_2505", "dgxc2505_grok1_314b_gb200_256_fp8", "25.04.00", "on", "row notes"),
    ("dgxc_2505", "dgxc2505_llama4_400b_h100_512_bf16", "25.04.01", "off", "§5.57"),
    ("dgxc_2505", "dgxc2505_llama4_400b_h100_512_fp8", "25.04.01", "on", "§5.57"),
    ("dgxc_2505", "dgxc2505_deepseek_v3_671b_h100_512_bf16", "25.04.01", "off", "§5.44 csv"),
    ("dgxc_2505", "dgxc2505_deepseek_v3_671b_h100_1024_bf16", "25.04.01", "off", "§5.44 csv"),
    ("published_2026", "mbridge2511_dsv3_gb200_256_bf16", "25.11", "not read", "-"),
    ("published_2026", "mbridge2511_dsv3_gb200_256_mxfp8", "25.11", "not read", "-"),
    ("published_2026", "mbridge2511_qwen3_235b_gb200_256_bf16", "25.11", "not read", "-"),
    ("published_2026", "mbridge2511_gptoss120b_gb200_64_bf16", "25.11", "not read", "-"),
    ("megatron_bridge_2604", "mbridge260401_gptoss120b_gb200_64_bf16", "26.04.01", "TE scopes",
     "§5.17"),
    ("nemo_performance_25", "nemo2504_mixtral8x7b_gb200_64", "25.04", "not read", "-"),
    ("nemo_performance_25", "nemo2507_llama4scoutllm_gb200_64", "25.07", "not read", "-"),
)
#: host seconds of one ``Linear`` forward (bf16, hidden 2048, 8,192 tokens), PyTorch's module:
#: GB200's Grace and an H100 DGX's Xeon Platinum 8480C (NVIDIA/TransformerEngine issue #2053,
#: 2025-08-11, table 1; TE's own module 99.66 µs on GB200, the H100 TE figure cut in the copy)
GRACE_LINEAR_HOST_S = 37.08e-6
X86_LINEAR_HOST_S = 13.48e-6
GRACE_HOST_RATIO = GRACE_LINEAR_HOST_S / X86_LINEAR_HOST_S
#: reference files whose GB200 rows table 3 estimates
WHATIF_FILES = ("dgxc_2505", "nemo_performance_25", "published_2026", "megatron_bridge_2604")
#: the 25.04.01 GB200 MoE rows the brief names (Maverick and DeepSeek-V3), by id prefix
TARGETS = ("dgxc2505_llama4_400b_gb200", "dgxc2505_deepseek_v3_671b_gb200")


def container_of(entry: dict) -> str:
    """The NeMo container a row names in its source fields (``nvcr.io/nvidia/nemo:X``, "X NeMo
    container", "Container: NeMo X"), or "-"."""
    src = entry.get("source", {})
    text = " ".join(str(src.get(k, "")) for k in ("also", "table"))
    for pat in (r"nemo:(\d\d\.\d\d(?:\.\d\d)?)", r"(\d\d\.\d\d(?:\.\d\d)?) NeMo container",
                r"NeMo (\d\d\.\d\d(?:\.\d\d)?)"):
        hit = re.search(pat, text)
        if hit:
            return hit.group(1)
    return "-"


def tray_cluster(cl: Cluster) -> Cluster:
    """``cl`` with each tray (``gpus_per_tray`` GPUs) its own NVLink domain and node: the same
    GPUs, NICs per GPU and fabric, no multi-node NVLink (table 3's what-if)."""
    per = cl.gpus_per_tray or cl.gpus_per_node
    n = sum(g.num_nodes for g in cl.groups) * cl.gpus_per_node
    groups = (replace(cl.groups[0], num_nodes=n // per),)
    return replace(cl, gpus_per_node=per, nics_per_node=per * cl.nics_per_node
                   // cl.gpus_per_node, nvlink_domain_gpus=per, groups=groups)


def whatif_rows() -> list[tuple]:
    """``(file, id, container, measured s, estimated s, error %, tray what-if s, error %)``
    of every GB200 row of ``WHATIF_FILES`` that resolves (table 3)."""
    out = []
    for name in WHATIF_FILES:
        for e in load_reference(DATA + name + ".json"):
            case = case_from_entry(e)
            job = case.job
            if job is None or case.measured_step_s is None or job.cluster.gpu.name != "GB200":
                continue
            ms = case.measured_step_s
            a = estimate(job).step_time_s
            b = estimate(replace(job, cluster=tray_cluster(job.cluster))).step_time_s
            out.append((name, e["id"], container_of(e), ms, a, 100 * (a / ms - 1), b,
                        100 * (b / ms - 1)))
    return out


def _entries() -> dict[str, dict]:
    out = {}
    for name in sorted({f for f, *_ in ROWS}):
        for e in load_reference(DATA + name + ".json"):
            out[e["id"]] = e
    return out


def rows() -> list[dict]:
    """One dict per ``ROWS`` entry: the columns of table 1 (seconds and bytes; see the
    module docstring)."""
    entries = _entries()
    out = []
    for fname, rid, container, graphs, graph_src in ROWS:
        case = case_from_entry(entries[rid])
        job = case.job
        p, m, cl = job.plan, job.model, job.cluster
        est = estimate(job)
        sc = stage_costs(job)
        moe = sc.by_kind["moe"] if sc.by_kind else sc
        mb = est.num_microbatches
        moe_per_rank = m.num_moe_layers / p.pp
        layers_per_rank = m.num_layers / p.pp
        gap = case.measured_step_s - est.step_time_s
        ep_bytes = float(moe.ep_bytes)
        etp = p.etp or 1
        one = cm.collective_time("alltoall", ep_bytes, p.ep, etp, cl,
                                 float(sc.ep_remote_scale), float(sc.ep_nvlink_share))
        a2a = 2.0 * float(one)                       # forward + backward, each dispatch+combine
        wire = 2.0 * ep_bytes * (p.ep - 1) / p.ep    # bytes on the wire per GPU, fwd + bwd
        share = m.layer_shares().get("moe", 0.0)
        code = DISPATCHERS.index(p.moe_dispatcher)
        sync = float(moe_sync_time(m, job.framework, cl.gpu, code, p.moe_pad_to_capacity)) \
            / share if share else 0.0
        miss = gap / (mb * moe_per_rank)
        out.append(dict(
            file=fname, id=rid, container=container, graphs=graphs, graph_src=graph_src,
            gpu=cl.gpu.name, dtype=job.dtype, dispatcher=p.moe_dispatcher,
            layout=f"tp{p.tp} pp{p.pp}" + (f" v{p.vpp}" if p.vpp > 1 else "")
            + f" ep{p.ep} etp{etp} mb{mb}",
            ep=p.ep, measured=case.measured_step_s, est=est.step_time_s,
            err=100 * (est.step_time_s / case.measured_step_s - 1),
            miss=miss, layer=float(moe.layer_fwd + moe.layer_bwd),
            t_layer=case.measured_step_s / (mb * layers_per_rank),
            a2a=a2a, wire=wire, rate=wire / a2a,
            rate_needed=wire / (a2a + miss) if a2a + miss > 0 else None,
            sync=sync, pad=p.moe_pad_to_capacity))
    return out


def sync_host_path_s(dispatcher: str) -> float:
    """Host seconds per MoE layer forward the model puts on the GPU's path after the
    dispatcher's device-to-host sync (``moe_time.moe_sync_time`` less its launch gaps):
    ``MOE_SYNCS_FWD`` syncs, each ``MOE_SYNC_HOST_OPS`` operators of ``HOST_PATH_S``."""
    ops = moe_bytes.MOE_SYNC_HOST_OPS[DISPATCHERS.index(dispatcher)]
    return moe_bytes.MOE_SYNCS_FWD * ops * HOST_PATH_S


def _target(r: dict) -> bool:
    return r["id"].startswith(TARGETS)


def candidates(rs: list[dict], wi: list[tuple]) -> list[tuple[str, str, str, str]]:
    """``(candidate, figure on the targets, figure on the controls, reading)``, per MoE layer
    and micro-batch (``wi``: ``whatif_rows()``)."""
    tg = [r for r in rs if _target(r)]
    gb_ctl = [r for r in rs if not _target(r) and "GB200" in r["gpu"]]

    def span(vals, fmt="{:.2f}"):
        return f"{fmt.format(min(vals))}..{fmt.format(max(vals))}"

    host_now = [sync_host_path_s(r["dispatcher"]) * (GRACE_HOST_RATIO - 1.0)
                * moe_bytes.count_exchange(r["pad"]) for r in tg]
    paths = [r["miss"] / GRACE_LINEAR_HOST_S for r in tg]
    need = [r["rate_needed"] / 1e9 for r in tg]
    ctl_fit = [r for r in gb_ctl if r["dispatcher"] == "alltoall" and r["ep"] >= 32]
    by_id = {r["id"]: r for r in tg}
    mav = [(by_id[i]["miss"], by_id[i.replace("bf16", "fp8")]["miss"], by_id[i]["layer"],
            by_id[i.replace("bf16", "fp8")]["layer"])
           for i in sorted(by_id) if "llama4" in i and i.endswith("bf16")]
    wt = [x for x in wi if x[1].startswith(TARGETS)]
    wc: dict[str, list[tuple]] = {}
    for x in wi:
        if not x[1].startswith(TARGETS):
            wc.setdefault(x[2], []).append(x)
    return [
        ("miss M (ms)", span([1e3 * r["miss"] for r in tg]),
         span([1e3 * r["miss"] for r in gb_ctl]), "the time to explain"),
        ("Grace host x the model's host terms (ms)",
         span([1e3 * h for h in host_now], "{:.3f}"),
         "same rule, same size", f"x{GRACE_HOST_RATIO:.2f} (TE #2053) on the sync's host "
         "path: µs, not ms; and drop-and-pad runs no sync"),
        ("host-bound: Linear-forward host paths (37.08 µs) in M", span(paths, "{:.0f}"),
         "Grok-1 GB200 graphed (25.04.00)", "needs an op count per layer the model "
         "does not hold; no measurement of this stack's host time per layer"),
        ("drop-and-pad: D2H sync charged (ms)", span([1e3 * r["sync"] for r in tg], "{:.3f}"),
         "same on every padded row", "none runs and none is charged (§5.125: the "
         "count all-gather neither); taking them off made the rows faster"),
        ("all-to-all rate the miss needs (GB/s per GPU)", span(need, "{:.0f}"),
         "; ".join(f"{r['id'].split('_')[1]} ep{r['ep']} {1e3 * r['miss']:+.2f} ms"
                   for r in ctl_fit),
         "25.11's DeepSeek-V3 / Qwen3-235B run the same dispatcher at ep 32/64 on GB200 "
         "and fit; gpt-oss misses as much on B200 and H100 (§5.58): not the fabric"),
        ("CUDA graphs off (ms)", "0 (the model is eager for every row)", "Grok-1: on, "
         "not priced", "graph savings are not modelled, so 'off' adds nothing"),
        ("GEMM rate (power, clocks): fp8/bf16 miss against fp8/bf16 layer",
         " / ".join(f"{m8 / m16:.2f} vs {g8 / g16:.2f}" for m16, m8, g16, g8 in mav),
         "-", "a rate shortfall would scale the miss like the layer; the a2a bytes are "
         "the same in both (16-bit dispatch)"),
        ("tray what-if: error as is -> without multi-node NVLink (%)",
         span([x[5] for x in wt], "{:+.1f}") + " -> " + span([x[7] for x in wt], "{:+.1f}"),
         "; ".join(f"{k}: " + span([x[5] for x in v], "{:+.1f}") + " -> "
                   + span([x[7] for x in v], "{:+.1f}") for k, v in sorted(wc.items())),
         "a what-if: the launchers request 16-tray segments with MNNVL (§5.83)"),
    ]


def _md(header: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(out)


def main(rs: list[dict] | None = None,
         wi: list[tuple] | None = None) -> tuple[list[dict], list[tuple]]:
    """Print the tables and return the rows they print, ``(rs, wi)``; ``rs`` and ``wi``:
    ``rows()`` and ``whatif_rows()`` already computed (computed here when None)."""
    rs = rows() if rs is None else rs
    print("Table 1. GB200 MoE rows of NeMo 25.04.01, their H100 twins and GB200 controls "
          "(ms per MoE layer and micro-batch unless stated)\n")
    print(_md(["row", "container", "graphs", "layout", "measured s", "est s", "err",
               "M", "G", "T (all layers)", "A (4 a2a)", "W MB", "W/A GB/s", "W/(A+M) GB/s",
               "sync"],
              [[r["id"], r["container"], r["graphs"], r["layout"], f"{r['measured']:.3f}",
                f"{r['est']:.3f}", f"{r['err']:+.1f} %", f"{1e3 * r['miss']:.2f}",
                f"{1e3 * r['layer']:.2f}", f"{1e3 * r['t_layer']:.2f}",
                f"{1e3 * r['a2a']:.3f}", f"{r['wire'] / 1e6:.0f}", f"{r['rate'] / 1e9:.0f}",
                "-" if r["rate_needed"] is None else f"{r['rate_needed'] / 1e9:.0f}", f"{1e3 * r['sync']:.3f}"] for r in rs]))
    wi = whatif_rows() if wi is None else wi
    print("\nTable 2. Candidates, per MoE layer and micro-batch\n")
    print(_md(["candidate", "Maverick + DeepSeek-V3 GB200 (25.04.01)", "controls (by container)",
               "reading"], [list(c) for c in candidates(rs, wi)]))
    print("\nTable 3. What-if (not in the model): every GB200 row with each tray its own "
          "NVLink domain (cross-tray traffic over the trays' NICs)\n")
    print(_md(["file", "row", "container", "measured s", "est s", "err", "tray what-if s",
               "err"],
              [[f, i, c, f"{m:.3f}", f"{a:.3f}", f"{ea:+.1f} %", f"{b:.3f}", f"{eb:+.1f} %"]
               for f, i, c, m, a, ea, b, eb in wi]))
    groups: dict[str, list[tuple]] = {}
    for x in wi:
        key = "targets (Maverick, DeepSeek-V3; 25.04.01)" if x[1].startswith(TARGETS) \
            else f"other rows, container {x[2]}"
        groups.setdefault(key, []).append(x)
    print("\nTable 3b. Mean absolute error by group, as is -> tray what-if\n")
    print(_md(["group", "rows", "as is", "tray what-if"],
              [[k, str(len(v)), f"{sum(abs(x[5]) for x in v) / len(v):.1f} %",
                f"{sum(abs(x[7]) for x in v) / len(v):.1f} %"]
               for k, v in sorted(groups.items())]))
    return rs, wi


if __name__ == "__main__":
    main()

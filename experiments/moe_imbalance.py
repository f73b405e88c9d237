"""The MoE routing imbalance (the hottest expert-parallel rank's routed tokens over the mean,
the plan's ``moe_imbalance``): what the reference runs did, the published measurements, and
what ``strategies.moe_balance`` derives from them (docs/calibration.md §5.73).

    python experiments/moe_imbalance.py [--validate]

Prints four tables (``--validate`` a fifth: each reference file's MoE rows, those whose
plan has ``ep``, analytic MAPE and mean signed error, ``simulator.cli validate --no-sim``):
(1) each stack's routing regime as its benchmark scripts set it;
(2) the published load measurements, per expert or per rank, with the training stage;
(3) the per-rank imbalance the model derives for the reference families' expert-parallel
layouts (sampling under forced balancing; the loss-free and auxiliary-loss skews per rank;
the default); (4) each reference MoE row's imbalance as the reader sets it.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from strategies.cost import token_counts  # noqa: E402
from strategies.moe_balance import (AUX_LOSS_MAXVIO_GLOBAL, LOSS_FREE_MAXVIO_GLOBAL,  # noqa: E402
                                    default_imbalance, forced_imbalance, rank_skew)
from strategies.presets import model_preset  # noqa: E402
from strategies.reference.cases import case_from_entry, load_reference  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (stack and rows, forced balancing, data, balancing of a learning router, token dropping,
#: steps, source): transcribed from the scripts named (git tags of the public repositories)
REGIMES = (
    ("Megatron-Bridge v0.2.0 (25.11 rows, published_2026.json)",
     "yes: moe_router_force_load_balancing = True",
     "mock (random tokens)", "n/a (logits replaced)", "dropless (capacity -1 unless "
     "--use_tokendrop)", "50",
     "scripts/performance/configs/{deepseek,qwen3,gpt_oss}/*_llm_pretrain.py L43/L47+L64/L37; "
     "utils/helpers.py L88, L229-234"),
    ("Megatron-Bridge v0.4.2 (26.04.01 rows, megatron_bridge_2604.json)",
     "yes: moe_router_force_load_balancing = True",
     "mock (argument_parser.py L314 default)", "n/a (logits replaced)",
     "dropless (utils/overrides.py L292-296)", "50 (overrides.py L45)",
     "scripts/performance/configs/{deepseek,qwen,gpt_oss}/*_llm_pretrain.py L45/L44/L36"),
    ("Megatron-Bridge 26.06 (heldout_2026b.json)",
     "yes (the table's footnote; the recipes at 067f987, Aug 2026, after the table)", "mock",
     "n/a", "dropless", "50", "src/megatron/bridge/perf_recipes/deepseek/common.py L37, "
     "qwen/<gpu>/qwen3_moe.py, gpt_oss/<gpu>/gpt_oss.py (gpt_oss/common.py L93 turns it "
     "off for the legacy 20B defaults only)"),
    ("NeMo 2 performance scripts (25.02-25.07: Mixtral, Llama 4 rows of "
     "nemo_performance_25.json)", "no", "mock (MockDataModule)",
     "aux loss from random initialisation (Mixtral moe_aux_loss_coeff 0.01, "
     "nemo/collections/llm/gpt/model/mixtral.py L60)",
     "token drop at capacity 1.0, padded to capacity (performance_mode=True: "
     "MegatronTokenDropCallback): every expert runs its mean share, ι = 1",
     "100 (--max_steps default)",
     "github:NVIDIA/NeMo v2.3.0 scripts/performance/llm/pretrain_mixtral_8x7b.py L52; "
     "recipes/mixtral_8x7b.py L226; lightning/pytorch/callbacks/moe_token_drop.py L36-49"),
    ("DGX Cloud 25.04/25.05 (Grok-1, DeepSeek-V3, Llama 4 rows of dgxc_2505.json)", "no",
     "mock", "aux loss (Grok-1 yaml moe_aux_loss_coeff 0.01)",
     "token drop at capacity 1.0, padded: ι = 1", "as launched",
     "grok1/cfg/grok1_314b.yaml L53-54 (v25.04.02); NeMo 6f2c6fd pretrain_grok1_314b.py "
     "L212/L300; NeMo 7a8f1cc pretrain_deepseek_v3.py L40, L80-81 (USE_TOKEN_DROP)"),
    ("NeMo 2 DeepSeek-V3 script at HEAD 8cfedd7 (after the rows)", "H100 only (flex/DeepEP)",
     "mock", "n/a on H100", "token drop on Blackwell (USE_TOKEN_DROP)", "100",
     "NeMo scripts/performance/llm/pretrain_deepseek_v3.py L76-89"),
    ("DeepSeek-V3 technical report (deepseekv3_report_h800_2048)", "no",
     "real (14.8T tokens)", "aux-loss-free bias (update speed 0.001) + sequence-wise "
     "aux loss 0.0001", "no token dropping", "the whole run",
     "arXiv:2412.19437 §2.1.2 (no token dropping), §4.2 (γ, α)"),
)

#: published load measurements: (source, what, scope, stage, loss-free, aux loss)
MEASUREMENTS = (
    ("Wang et al. 2024, arXiv:2408.15664, Table 2", "MaxVio_global, per expert "
     "(max expert load − mean)/mean", "validation set (global)",
     "end of training: 1B model 100B tokens, 3B model 200B tokens (64 routed experts, "
     "top-6, sigmoid gate)", "1B 0.04, 3B 0.04", "1B 0.72, 3B 0.52 (α = 0.001)"),
    ("Wang et al. 2024, Table 6 (appendix C)", "MaxVio_global, per expert",
     "validation set", "1B model, softmax gate", "0.027", "0.937"),
    ("Wang et al. 2024, Figures 3 and 5", "MaxVio_batch / per computation batch",
     "per training batch", "through training", "plotted only (not transcribed)",
     "plotted only"),
    ("Megatron-Core moe_router_force_load_balancing (router.py, moe_utils.RandomSTE)",
     "per rank, derived (strategies.moe_balance.forced_imbalance)", "per micro-batch",
     "benchmark (random logits)", "n/a", "n/a"),
)


def md(rows: list[tuple], head: tuple) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


#: the reference families' expert-parallel layouts: (preset, mbs, tp, ep)
LAYOUTS = (("deepseek-v3", 1, 1, 64), ("deepseek-v3", 1, 1, 32), ("deepseek-v3", 2, 1, 8),
           ("qwen3-235b-a22b", 1, 1, 32), ("qwen3-235b-a22b", 1, 1, 8),
           ("qwen3-30b-a3b", 4, 1, 8), ("qwen3-30b-a3b", 1, 1, 16),
           ("gpt-oss-120b", 4, 1, 64), ("gpt-oss-120b", 1, 1, 8))


def layout_rows() -> list[tuple]:
    """Per layout: experts per rank, forced (sampling) ι, the loss-free and the auxiliary-loss
    skews per rank (``rank_skew``) and the default."""
    out = []
    for name, b, tp, ep in LAYOUTS:
        m = model_preset(name)
        f = float(forced_imbalance(m, b, tp, 1, ep))
        lf = float(rank_skew(m, ep))
        aux = [float(rank_skew(m, ep, v)) for v in AUX_LOSS_MAXVIO_GLOBAL.values()]
        d = float(default_imbalance(m, b, tp, 1, ep))
        out.append((name, b, ep, m.num_experts // ep, f"{f:.4f}", f"{lf:.4f}",
                    f"{aux[0]:.3f} / {aux[1]:.3f}", f"{d:.4f}"))
    return out


def reference_rows() -> list[tuple]:
    """Each reference MoE row with ``ep > 1``: its router as the row says, the imbalance the
    reader resolves (``token_counts.moe_load``), and its analytic step over the same row's at
    ``moe_imbalance = 1`` (balanced)."""
    from dataclasses import replace

    from strategies.estimate.scalar import estimate
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        try:
            rows = load_reference(path)
        except Exception:       # a file that is not a list of cases
            continue
        for r in rows:
            c = case_from_entry(r, rows)
            if c.job is None or not c.job.model.is_moe or c.job.plan.ep <= 1:
                continue
            p, m = c.job.plan, c.job.model
            load = float(token_counts.moe_load(p.ep, p.imbalance, p.capacity_factor, m, p.mbs, p.tp,
                                               p.cp, p.expert_tp))
            kind = (r.get("plan") or {}).get("moe_balance") or "trained (default)"
            one = replace(c.job, plan=replace(p, moe_imbalance=1.0))
            step = estimate(c.job).step_time_s / estimate(one).step_time_s - 1
            out.append((os.path.basename(path), r["id"], p.ep, p.mbs, kind, f"{load:.4f}",
                        f"{100 * step:+.2f} %"))
    return out


def validate_rows() -> list[tuple]:
    """Per reference file: its MoE rows (plans with ``ep``), their analytic MAPE and mean
    signed error (``python -m simulator.cli validate --reference FILE --no-sim --json``)."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "strategies/reference/data/*.json"))):
        r = subprocess.run([sys.executable, "-m", "simulator.cli", "validate", "--reference",
                            path, "--no-sim", "--json"], cwd=ROOT, capture_output=True,
                           text=True)
        if r.returncode:
            continue
        errs = [c["analytic_error_pct"] for c in json.loads(r.stdout)["cases"]
                if c["analytic_error_pct"] is not None and " ep" in " " + c["plan"]]
        if errs:
            out.append((os.path.basename(path), len(errs),
                        f"{sum(map(abs, errs)) / len(errs):.2f} %",
                        f"{sum(errs) / len(errs):+.2f} %"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--validate", action="store_true",
                    help="also each reference file's MoE rows' analytic MAPE and signed error")
    args = ap.parse_args()
    print("## What the runs did\n")
    print(md(list(REGIMES), ("stack (rows)", "forced balancing", "data",
                             "learning router's balancing", "token dropping", "steps",
                             "source")))
    print("\n## Published load measurements\n")
    print(md(list(MEASUREMENTS), ("source", "statistic", "scope", "stage", "loss-free",
                                  "auxiliary loss")))
    print(f"\nadopted: loss-free MaxVio_global {LOSS_FREE_MAXVIO_GLOBAL} (the default's skew); "
          f"auxiliary loss {AUX_LOSS_MAXVIO_GLOBAL} (state it: moe_imbalance)")
    print("\n## Per rank, derived (per micro-batch; skew = MaxVio·ep/E: the hottest expert's "
          "excess on a rank whose other experts carry the mean)\n")
    print(md(layout_rows(), ("model", "mbs", "ep", "experts per rank",
                             "forced: sampling ι", "loss-free skew", "aux-loss skew (1B / 3B)",
                             "default ι")))
    print("\n## The reference rows (python experiments/moe_imbalance.py)\n")
    print(md(reference_rows(), ("file", "row", "ep", "mbs", "router", "ι",
                                "step vs ι = 1")))
    if args.validate:
        print("\n## The MoE rows' analytic error (python experiments/moe_imbalance.py "
              "--validate)\n")
        print(md(validate_rows(), ("file", "MoE rows", "MAPE", "mean signed error")))


if __name__ == "__main__":
    main()

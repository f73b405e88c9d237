"""A user's own HuggingFace ``config.json`` through every command: does it run, and is what it
says self-consistent?

The configs are the published ``config.json`` files under ``tests/data/hf/`` and variants a
user really has (``CONFIGS``): other sizes of the same families (their model cards' fields),
and the same models as transformers 5 writes them back (``rope_parameters`` for
``rope_scaling``, ``dtype``, an explicit ``layer_types``), with the fields real configs carry
that no cost reads (``quantization_config``, ``rope_scaling`` variants). For each config:

- ``estimate --json`` under no stack and each ``--framework`` on one sensible plan
  (``experiments.preset_matrix.sensible_plan``), twice under no stack (same bytes), and once
  more on the ``inputs.model`` it resolved, written back as a model file (the same step
  time and memory);
- ``inputs.model.params_total`` / ``params_active`` against the model card's figures
  (``CARDS``, each cited);
- ``estimate --export`` for each stack's own export kind;
- on a sample: ``search --json`` in its cheapest mode (``--top 1 --workers 1 --reference
  none``), ``simulate --json`` of the estimate's plan, ``compare --json`` where the plan is
  pipelined, ``whatif --json`` on one axis, and one ``simulate --timeline``.

Each call fails on a traceback, an exit other than 0 or 2, an exit 2 without one
``paraplan: error:`` line, a null/negative number (``preset_matrix.numeric_problems``), a
breakdown that does not add up, ``fits`` against the stated memory. Prints a table per
command and a summary; asserts nothing.

    python experiments/hf_config_sweep.py                 # all (a few minutes on one core)
    python experiments/hf_config_sweep.py --configs qwen3_8b,gpt_oss_20b --search 0
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.preset_matrix import (Call, call, check_exit, numeric_problems,  # noqa: E402
                                       plan_text, report_problems, same_bytes, sensible_plan,
                                       spread)
from strategies.framework import PROFILES  # noqa: E402
from strategies.hf_config import load_model_arg  # noqa: E402
from topologies.cluster import parse_cluster_arg  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"
STACKS = ("-", *PROFILES)
#: each stack's own export kind (docs/cli.md "--export")
EXPORTS = {"megatron-core": "megatron", "nemo": "megatron", "megatron-lm-2021": "megatron",
           "megatron-deepspeed": "deepspeed", "torchtitan": "torchtitan",
           "jax-xla": "maxtext", "pytorch-eager": "llm-foundry"}


def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _tf5(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` as transformers 5 writes it back: ``rope_scaling`` and ``rope_theta`` folded
    into ``rope_parameters``, ``dtype`` for ``torch_dtype``."""
    c = copy.deepcopy(cfg)
    rp = dict(c.pop("rope_scaling", None) or {"rope_type": "default"})
    if "type" in rp:
        rp["rope_type"] = rp.pop("type")
    rp["rope_theta"] = c.pop("rope_theta", 10000.0)
    c["rope_parameters"] = rp
    if "torch_dtype" in c:
        c["dtype"] = c.pop("torch_dtype")
    c["transformers_version"] = "5.0.0"
    return c


def _configs() -> dict[str, dict[str, Any]]:
    """name -> config.json mapping."""
    out = {p.stem: _load(p.name) for p in sorted(DATA.glob("*.json"))}
    q8 = out["qwen3_8b"]
    # Qwen/Qwen3-0.6B config.json: tied embedding, head_dim 128 over hidden 1024
    out["qwen3_0_6b"] = {**q8, "_name_or_path": "Qwen3-0.6B", "hidden_size": 1024,
                         "intermediate_size": 3072, "num_hidden_layers": 28,
                         "num_attention_heads": 16, "num_key_value_heads": 8,
                         "max_position_embeddings": 40960, "max_window_layers": 28,
                         "tie_word_embeddings": True}
    # the Qwen3 card's long-context recipe: YaRN factor 4 over 32,768 positions
    out["qwen3_8b_yarn"] = {**q8, "_name_or_path": "Qwen3-8B-yarn",
                            "max_position_embeddings": 131072,
                            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32768}}
    out["qwen3_8b_tf5"] = {**_tf5(q8), "_name_or_path": "Qwen3-8B-tf5", "sliding_window": None,
                           "layer_types": ["full_attention"] * q8["num_hidden_layers"]}
    q30 = out["qwen3_30b_a3b"]
    out["qwen3_30b_a3b_tf5"] = {**_tf5(q30), "_name_or_path": "Qwen3-30B-A3B-tf5"}
    # Qwen/Qwen3-Coder-480B-A35B-Instruct config.json
    out["qwen3_coder_480b"] = {**q30, "_name_or_path": "Qwen3-Coder-480B-A35B",
                               "hidden_size": 6144, "intermediate_size": 8192,
                               "moe_intermediate_size": 2560, "num_hidden_layers": 62,
                               "num_attention_heads": 96, "num_key_value_heads": 8,
                               "num_experts": 160, "num_experts_per_tok": 8,
                               "max_position_embeddings": 262144, "max_window_layers": 62}
    q57 = out["qwen2_57b_a14b"]
    # Qwen/Qwen1.5-MoE-A2.7B config.json (model_type qwen2_moe)
    out["qwen1_5_moe_a2_7b"] = {**q57, "_name_or_path": "Qwen1.5-MoE-A2.7B",
                                "hidden_size": 2048, "intermediate_size": 5632,
                                "moe_intermediate_size": 1408,
                                "shared_expert_intermediate_size": 5632,
                                "num_hidden_layers": 24, "num_attention_heads": 16,
                                "num_key_value_heads": 16, "num_experts": 60,
                                "num_experts_per_tok": 4, "max_position_embeddings": 8192,
                                "max_window_layers": 21, "sliding_window": 32768,
                                "vocab_size": 151936}
    # as transformers 5 writes Qwen2-MoE back: qkv_bias, a zero window, every layer full
    out["qwen2_57b_a14b_tf5"] = {**_tf5(q57), "_name_or_path": "Qwen2-57B-A14B-tf5",
                                 "qkv_bias": True, "sliding_window": 0,
                                 "layer_types": ["full_attention"] * q57["num_hidden_layers"]}
    mx = out["mixtral_8x22b"]
    # mistralai/Mistral-7B-v0.1 config.json: a 4096-token sliding window
    out["mistral_7b_v0_1"] = {**{k: v for k, v in mx.items() if k not in (
        "num_local_experts", "num_experts_per_tok", "output_router_logits",
        "router_aux_loss_coef")}, "model_type": "mistral", "_name_or_path": "Mistral-7B-v0.1",
        "architectures": ["MistralForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
        "rope_theta": 10000.0, "sliding_window": 4096}
    # mistralai/Mixtral-8x7B-v0.1 config.json (transformers >= 4.45 writes head_dim: null)
    out["mixtral_8x7b"] = {**mx, "_name_or_path": "Mixtral-8x7B", "hidden_size": 4096,
                           "intermediate_size": 14336, "num_hidden_layers": 32,
                           "num_attention_heads": 32, "num_key_value_heads": 8,
                           "vocab_size": 32000, "max_position_embeddings": 32768,
                           "rope_theta": 1e6, "sliding_window": None, "head_dim": None}
    go = out["gpt_oss_120b"]
    # openai/gpt-oss-20b config.json
    out["gpt_oss_20b"] = {**go, "_name_or_path": "gpt-oss-20b", "num_hidden_layers": 24,
                          "num_local_experts": 32,
                          "layer_types": go["layer_types"][:24]}
    out["gpt_oss_120b_tf5"] = {**_tf5(go), "_name_or_path": "gpt-oss-120b-tf5"}
    v3 = out["deepseek_v3"]
    out["deepseek_v3_tf5"] = {**_tf5(v3), "_name_or_path": "deepseek-v3-tf5"}
    l4 = out["llama4_scout"]["text_config"]
    L = 48
    # meta-llama/Llama-4-Maverick-17B-128E config.json text_config: MoE every other layer
    out["llama4_maverick"] = {
        "_name_or_path": "llama4-maverick-17b-128e", "model_type": "llama4",
        "architectures": ["Llama4ForConditionalGeneration"], "tie_word_embeddings": False,
        "text_config": {**l4, "num_local_experts": 128, "interleave_moe_layer_step": 2,
                        "moe_layers": list(range(1, L, 2)), "rope_scaling": None,
                        "max_position_embeddings": 1048576}}
    return out


#: the model card's parameter counts (total, active) and where they are printed
CARDS: dict[str, tuple[float, float | None, str]] = {
    "deepseek_v3": (671e9, 37e9, "deepseek-ai/DeepSeek-V3 card: 671B total, 37B activated"),
    "deepseek_v3_tf5": (671e9, 37e9, "as deepseek_v3"),
    "deepseek_v2": (236e9, 21e9, "deepseek-ai/DeepSeek-V2 card: 236B total, 21B activated"),
    "deepseek_v2_lite": (15.7e9, 2.4e9, "deepseek-ai/DeepSeek-V2-Lite card: 15.7B, 2.4B"),
    "qwen2_57b_a14b": (57e9, 14e9, "Qwen/Qwen2-57B-A14B card: 57B, 14B activated"),
    "qwen1_5_moe_a2_7b": (14.3e9, 2.7e9, "Qwen/Qwen1.5-MoE-A2.7B card: 14.3B, 2.7B"),
    "qwen3_8b": (8.2e9, None, "Qwen/Qwen3-8B card: 8.2B"),
    "qwen3_8b_yarn": (8.2e9, None, "as qwen3_8b"),
    "qwen3_8b_tf5": (8.2e9, None, "as qwen3_8b"),
    "qwen3_0_6b": (0.6e9, None, "Qwen/Qwen3-0.6B card: 0.6B (0.44B non-embedding)"),
    "qwen3_30b_a3b": (30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B card: 30.5B, 3.3B activated"),
    "qwen3_30b_a3b_tf5": (30.5e9, 3.3e9, "as qwen3_30b_a3b"),
    "qwen3_235b_a22b": (235e9, 22e9, "Qwen/Qwen3-235B-A22B card: 235B, 22B activated"),
    "qwen3_coder_480b": (480e9, 35e9, "Qwen/Qwen3-Coder-480B-A35B card: 480B, 35B"),
    "llama4_scout": (109e9, 17e9, "meta-llama/Llama-4-Scout-17B-16E card: 109B, 17B active"),
    "llama4_maverick": (400e9, 17e9, "meta-llama/Llama-4-Maverick-17B-128E card: 400B, 17B"),
    "gpt_oss_120b": (116.83e9, 5.13e9, "gpt-oss model card Table 1: 116.83B, 5.13B active "
                     "(without the embedding)"),
    "gpt_oss_120b_tf5": (116.83e9, 5.13e9, "as gpt_oss_120b"),
    "gpt_oss_20b": (20.91e9, 3.61e9, "gpt-oss model card Table 1: 20.91B, 3.61B active"),
    "mixtral_8x22b": (141e9, 39e9, "mistralai/Mixtral-8x22B card: 141B, 39B active"),
    "qwen2_57b_a14b_tf5": (57e9, 14e9, "as qwen2_57b_a14b"),
    "mistral_7b_v0_1": (7.3e9, None, "mistralai/Mistral-7B-v0.1 card: 7.3B"),
    "mixtral_8x7b": (46.7e9, 12.9e9, "Mixtral of Experts (arXiv 2401.04088): 46.7B, 12.9B"),
}
#: the cards that quote the active count without the embedding table (DeepSeek's and
#: OpenAI's convention, docs/models.md "Active"): compared as ``params_active - V·h``
NO_EMBED_ACTIVE = ("deepseek", "gpt_oss")


def cluster_for(total: float) -> str:
    """A cluster the model fits on with a plain plan: ~20 bytes per parameter over GPUs."""
    gpus = 8
    while gpus * 80e9 * 0.4 < 20 * total:
        gpus *= 2
    return f"dgx-h100:{gpus // 8}"


def card_problems(name: str, d: dict[str, Any]) -> tuple[str, list[str]]:
    """The reported counts against the card (rounded as the card rounds: within 2 %)."""
    m = d["inputs"]["model"]
    tot, act = m.get("params_total"), m.get("params_active")
    if tot is None or act is None:
        return "", ["inputs.model lacks params_total/params_active"]
    if name not in CARDS:
        return f"{tot / 1e9:.2f}B/{act / 1e9:.2f}B (no card)", []
    ct, ca, _ = CARDS[name]
    out = []
    if abs(tot / ct - 1) > 0.02:
        out.append(f"params_total {tot / 1e9:.2f}B vs card {ct / 1e9:g}B")
    if name.startswith(NO_EMBED_ACTIVE):
        act -= m["vocab_size"] * m["hidden_size"]
    if ca is not None and abs(act / ca - 1) > 0.05:
        out.append(f"params_active {act / 1e9:.2f}B vs card {ca / 1e9:g}B")
    return f"{tot / 1e9:.2f}B/{act / 1e9:.2f}B", out


def model_problems(d: dict[str, Any]) -> list[str]:
    """``inputs.model`` of a search, compare or whatif report without its parameter counts."""
    m = (d.get("inputs") or {}).get("model") or {}
    return [f"inputs.model lacks {k}" for k in ("params_total", "params_active")
            if not isinstance(m.get(k), int)]


def readback(c: Call, folder: Path) -> Call:
    """``estimate`` of the model the report resolved (``inputs.model`` as a model file,
    docs/cli.md): the same step time and memory."""
    path = folder / "resolved.json"
    path.write_text(json.dumps(c.data["inputs"]["model"]))
    argv = list(c.argv)
    argv[argv.index("--model") + 1] = str(path)
    r = call(argv)
    check_exit(r)
    if r.data is not None and (r.data["step_time_s"], r.data["memory"]) != \
            (c.data["step_time_s"], c.data["memory"]):
        r.problems.append(f"read back: step {r.data['step_time_s']} vs {c.data['step_time_s']}")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=None, help="comma-separated config names (default all)")
    ap.add_argument("--search", type=int, default=4, help="searches, an even sample (4)")
    ap.add_argument("--simulate", type=int, default=5, help="simulations, an even sample (5)")
    ap.add_argument("--compare", type=int, default=2, help="compare runs (2)")
    ap.add_argument("--whatif", type=int, default=1, help="whatif runs (1)")
    a = ap.parse_args(argv)
    cfgs = _configs()
    names = a.configs.split(",") if a.configs else list(cfgs)
    tmp = Path(tempfile.mkdtemp(prefix="hf_sweep_"))
    rows: list[tuple[str, str, Call]] = []      # (config, command, call)
    cards: list[tuple[str, str, list[str]]] = []
    loaded: dict[str, tuple[str, dict[str, Any], Any]] = {}
    t0 = time.perf_counter()
    for name in names:
        path = tmp / name / "config.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(cfgs[name], indent=2))
        try:
            model = load_model_arg(str(path))
        except Exception as e:       # noqa: BLE001 - a refusal is reported through the CLI
            model = None
            print(f"{name}: load: {type(e).__name__}: {e}", file=sys.stderr)
        cname = cluster_for(model.num_params() if model is not None else 1e9)
        cl = parse_cluster_arg(cname)
        for stack in STACKS:
            fw = None if stack == "-" else PROFILES[stack]
            plan = sensible_plan(model, cl, fw) if model is not None else {"gbs": 8}
            base = ["--model", str(path), "--cluster", cname, "--plan", plan_text(plan)]
            base += [] if stack == "-" else ["--framework", stack]
            c = call(["estimate", *base, "--json"])
            check_exit(c)
            if c.data is not None:
                c.problems += report_problems(c.data, cl.min_hbm_bytes / 2**30)
            rows.append((name, f"estimate {stack}", c))
            if stack == "-":
                if not same_bytes(c, call(c.argv), ()):
                    c.problems.append("not deterministic: a second estimate differs")
                if c.data is not None:
                    got, probs = card_problems(name, c.data)
                    cards.append((name, got, probs))
                    rows.append((name, "estimate of inputs.model", readback(c, tmp / name)))
                loaded[name] = (cname, plan, base)
            if stack in EXPORTS:
                e = call(["estimate", *base, "--export", EXPORTS[stack], "--json"])
                check_exit(e)
                if e.data is not None and not (e.data.get("export") or {}).get("text"):
                    e.problems.append("export without text")
                rows.append((name, f"export {EXPORTS[stack]} ({stack})", e))
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    ok = [n for n in names if n in loaded and
          next(c for m, k, c in rows if m == n and k == "estimate -").rc == 0]
    small = sorted(ok, key=lambda n: load_model_arg(str(tmp / n / "config.json")).num_params())
    for name in spread(small[:max(len(small) // 2, 1)], a.search):
        cname, plan, _ = loaded[name]
        c = call(["search", "--model", str(tmp / name / "config.json"), "--cluster", cname,
                  "--global-batch", str(plan["gbs"]), "--top", "1", "--workers", "1",
                  "--reference", "none", "--json"])
        check_exit(c)
        if c.data is not None:
            c.problems += numeric_problems({k: v for k, v in c.data.items() if k != "execution"})
            c.problems += model_problems(c.data)
            if not c.data.get("plans"):
                c.problems.append("exit 0 without a plan")
            if name == small[0] and not same_bytes(c, call(c.argv), ("wall_s", "execution")):
                c.problems.append("not deterministic: a second search differs")
        rows.append((name, "search", c))
        print(f"search {name}: rc {c.rc} {c.wall_s:.0f} s", file=sys.stderr)
    for name in spread(small, a.simulate):
        cname, plan, base = loaded[name]
        c = call(["simulate", *base, "--json"])
        check_exit(c)
        if c.data is not None:
            c.problems += report_problems(c.data, parse_cluster_arg(cname).min_hbm_bytes / 2**30)
        rows.append((name, "simulate", c))
        print(f"simulate {name}: rc {c.rc} {c.wall_s:.0f} s", file=sys.stderr)
    piped = [n for n in small if loaded[n][1].get("pp", 1) > 1]
    for name in spread(piped, a.compare):
        c = call(["compare", *loaded[name][2], "--schedules", "1f1b,interleaved:2", "--json"])
        check_exit(c)
        if c.data is not None:
            c.problems += numeric_problems(c.data) + model_problems(c.data)
        rows.append((name, "compare", c))
    for name in spread(small[:3], a.whatif):
        cname, plan, _ = loaded[name]
        c = call(["whatif", "--model", str(tmp / name / "config.json"), "--cluster", cname,
                  "--global-batch", str(plan["gbs"]), "--vary", "inter_node_gbps=200,400",
                  "--workers", "1", "--json"])
        check_exit(c)
        if c.data is not None:
            # inputs.memory_limit_gib is null without --memory-limit: each variant's GPU less
            # 5 % (simulator/studies/whatif.py), not a NaN
            inputs = {k: v for k, v in c.data["inputs"].items() if k != "memory_limit_gib"}
            c.problems += numeric_problems({**{k: v for k, v in c.data.items()
                                               if k not in ("execution", "inputs")},
                                            "inputs": inputs}) + model_problems(c.data)
        rows.append((name, "whatif", c))
    if small:
        name = small[0]
        c = call(["simulate", *loaded[name][2], "--timeline", str(tmp / "t.png"), "--json"])
        check_exit(c)
        if c.rc == 0 and not (tmp / "t.png").exists():
            c.problems.append("no timeline written")
        rows.append((name, "simulate --timeline", c))

    print(f"{'config':22} {'command':34} {'exit':>4} {'wall s':>7}  problems / refusal")
    for name, cmd, c in rows:
        why = "; ".join(c.problems) or (c.err.strip().splitlines()[-1][:110] if c.rc else "")
        print(f"{name:22} {cmd:34} {c.rc:>4} {c.wall_s:7.2f}  {why}")
    print(f"\n{'config':22} {'total/active':22} card check")
    for name, got, probs in cards:
        print(f"{name:22} {got:22} {'; '.join(probs) or 'ok'}  ({CARDS.get(name, ('', '', '-'))[2]})")
    n_fail = sum(bool(c.problems) for _, _, c in rows) + sum(bool(p) for _, _, p in cards)
    n_ref = sum(c.rc == 2 and not c.problems for _, _, c in rows)
    print(f"\n{len(rows)} calls on {len(names)} configs: {n_fail} failing, {n_ref} refused, "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bad input to the fields recent sessions added (GPU catalog/YAML fields, GPU profiles,
``--framework`` and its feature refusals, plan fields, schedules, MoE config.json fields,
``--dtype`` block formats): one bad value at a time, each refused with exit status 2 and one
line on stderr that names the field, the value and the rule, no traceback, and no output file
left behind. The older kinds are in tests/test_cli_errors.py.

Runs in-process through ``simulator.cli.main`` (a few seconds); one sample as a subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cli.main import main
from strategies.errors import SpecError
from strategies.framework import get_profile
from strategies.stacks.expert_gemm import ExpertGemmLaunch
from strategies.hf_config import model_from_hf
from strategies.plan import plan_from_mapping
from tests.cli_cases import materialise
from topologies.gpus import gpu_from_mapping

ROOT = Path(__file__).resolve().parents[1]
H100 = ["--model", "llama3-8b", "--cluster", "dgx-h100:1"]        # 32 layers, 8 GPUs
MOE = ["--model", "qwen3-30b-a3b", "--cluster", "dgx-h100:2"]     # 128 experts, 16 GPUs
PROFILE = ("schema: paraplan-gpu-profile/1\ngpu: {gpu}\nbackend: fake\n"
           "gemm: [{{dtype: bf16, m: 8, n: 8, k: 8, seconds: {s}}}]\n")
DSV3 = dict(model_type="deepseek_v3", num_hidden_layers=4, hidden_size=256,
            num_attention_heads=8, num_key_value_heads=8, intermediate_size=1024,
            vocab_size=1000, max_position_embeddings=4096, n_routed_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=128, kv_lora_rank=64,
            qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, q_lora_rank=None,
            first_k_dense_replace=1, num_nextn_predict_layers=1, n_shared_experts=1,
            n_group=1, topk_group=1)
LLAMA4 = dict(model_type="llama4_text", num_hidden_layers=4, hidden_size=256,
              num_attention_heads=8, num_key_value_heads=4, head_dim=32, intermediate_size=1024,
              vocab_size=1000, max_position_embeddings=4096, num_local_experts=4,
              num_experts_per_tok=1, intermediate_size_mlp=512, interleave_moe_layer_step=2,
              attention_chunk_size=1024, no_rope_layer_interval=4)


def _cluster(gpu: str) -> str:
    """A one-node cluster file whose GPU is ``gpu`` (YAML flow text)."""
    return (f"gpu: {gpu}\nnodes: 1\ngpus_per_node: 8\nintra_node_GBps: 450\n"
            f"nics_per_node: 8\ninter_node_gbps: 400\n")


def _custom(extra: str) -> str:
    return _cluster("{name: X, bf16_tflops: 900, hbm_gib: 80, hbm_tbps: 3.3, " + extra + "}")


def _gpu_case(name, extra, words, dtype="bf16"):
    return (name, ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml", "--plan",
                   "tp=8,gbs=8", "--dtype", dtype], {"c.yaml": _custom(extra)}, words)


def _hf_case(name, cfg, words):
    return (name, ["estimate", "--model", "{d}/config.json", "--cluster", "dgx-h100:1",
                   "--plan", "gbs=8"], {"config.json": json.dumps(cfg)}, words)


def _plan(name, base, plan, words, *extra):
    return (name, ["estimate", *base, "--plan", plan, *extra], {}, words)


# (id, argv, files {name: text}, words the one stderr line must hold); "{d}": the files' folder
CASES = [
    # GPU catalog / YAML fields
    _gpu_case("exp-rate-negative", "exp_tera_per_s: -5", ["gpu.exp_tera_per_s=-5", "> 0"]),
    _gpu_case("exp-rate-zero", "exp_tera_per_s: 0", ["gpu.exp_tera_per_s=0", "> 0"]),
    _gpu_case("exp-rate-text", "exp_tera_per_s: fast", ["gpu.exp_tera_per_s='fast'", "number"]),
    _gpu_case("exp-rate-yaml11-exponent", "exp_tera_per_s: 1e9",
              ["gpu.exp_tera_per_s='1e9'", "number", "read as text", "1.0e+9"]),
    _gpu_case("exp-rate-out-of-range", "exp_tera_per_s: 1.0e+9",
              ["gpu.exp_tera_per_s=1000000000", "sanity limit"]),
    _gpu_case("attention-efficiency-above-1", "attention_efficiency: 2",
              ["gpu.attention_efficiency=2", "<= 1"]),
    _gpu_case("fa2-efficiency-negative", "fa2_attention_efficiency: -0.1",
              ["gpu.fa2_attention_efficiency=-0.1", "> 0"]),
    _gpu_case("fa2-efficiency-list", "fa2_attention_efficiency: [0.5]",
              ["gpu.fa2_attention_efficiency=[0.5]", "number"]),
    _gpu_case("fp8-efficiency-above-1", "fp8_tflops: 1800, fp8_matmul_efficiency: 1.5",
              ["gpu.fp8_matmul_efficiency=1.5", "<= 1"]),
    _gpu_case("fp8-efficiency-null", "fp8_matmul_efficiency: null",
              ["gpu.fp8_matmul_efficiency=None", "number"]),
    _gpu_case("wave-tile-without-sms", "wave_tile: [256, 128]",
              ["gpu.wave_tile=(256, 128)", "needs gpu.sm_count"]),
    _gpu_case("block-format-unknown", "block_formats: [mxfp9]",
              ["gpu.block_formats='mxfp9'", "mxfp8, mxfp4, nvfp4"]),
    _gpu_case("block-formats-not-a-list", "block_formats: mxfp8",
              ["gpu.block_formats='mxfp8'", "must be a list"]),
    # GPU profiles: gpu: {profile: FILE}
    ("profile-missing", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml", "--plan",
                         "tp=8,gbs=8"], {"c.yaml": _cluster("{profile: nope.yaml}")},
     ["gpu.profile=", "nope.yaml", "no such file"]),
    ("profile-not-text", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                          "--plan", "tp=8,gbs=8"], {"c.yaml": _cluster("{profile: 5}")},
     ["gpu.profile=5", "file path"]),
    ("profile-null", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                      "--plan", "tp=8,gbs=8"], {"c.yaml": _cluster("{profile: null}")},
     ["gpu.profile=None", "file path"]),
    ("profile-malformed-yaml", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                                "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": "schema: [1,\n"},
     ["gpu.profile=", "p.yaml", "malformed YAML"]),
    ("profile-a-list", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                        "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": "- a\n- b\n"},
     ["gpu.profile=", "p.yaml'", "must hold a mapping of keys, not a list"]),
    # a file that holds no mapping names the file, not the type as the value ('NoneType')
    ("profile-empty-file", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                            "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": ""},
     ["gpu.profile=", "p.yaml'", "not nothing (an empty file)"]),
    ("cluster-empty-file", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                            "--plan", "tp=8,gbs=8"], {"c.yaml": ""},
     ["cluster=", "c.yaml'", "a cluster file must hold a mapping of keys, not nothing"]),
    ("model-file-a-list", ["estimate", "--model", "{d}/m.yaml", "--cluster", "dgx-h100:1",
                           "--plan", "tp=8,gbs=8"], {"m.yaml": "- 1\n- 2\n"},
     ["model=", "m.yaml'", "a model file must hold a mapping of keys, not a list"]),
    ("profile-negative-seconds", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                                  "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": PROFILE.format(gpu="H100", s=-1)},
     ["profile.gemm[0].seconds=-1", "> 0 seconds"]),
    ("profile-seconds-as-text", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                                 "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": PROFILE.format(gpu="H100", s="1e-5")},
     ["profile.gemm[0].seconds='1e-5'", "read as text"]),
    ("profile-unknown-gpu", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                             "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{profile: p.yaml}"), "p.yaml": PROFILE.format(gpu="H9000", s="1.0e-5")},
     ["gpu.profile=", "p.yaml", "names gpu: H9000", "unknown GPU"]),
    ("profile-other-gpu", ["estimate", "--model", "llama3-8b", "--cluster", "{d}/c.yaml",
                           "--plan", "tp=8,gbs=8"],
     {"c.yaml": _cluster("{name: A100, profile: p.yaml}"),
      "p.yaml": PROFILE.format(gpu="H100", s="1.0e-5")},
     ["gpu.profile=", "measured on H100", "A100-SXM4-80GB"]),
    # --framework and the features a stack lacks
    _plan("framework-unknown", H100, "tp=8,gbs=8", ["--framework='megatron-xl'",
                                                    "unknown framework", "torchtitan"],
          "--framework", "megatron-xl"),
    ("framework-plan-file-not-a-name", ["estimate", *H100, "--plan", "{d}/p.yaml"],
     {"p.yaml": "tp: 8\ngbs: 8\nframework: [torchtitan]\n"},
     ["plan.framework=['torchtitan']", "unknown framework"]),
    ("framework-disagrees-with-plan-file", ["estimate", *H100, "--plan", "{d}/p.yaml",
                                            "--framework", "megatron-core"],
     {"p.yaml": "tp: 8\ngbs: 8\nframework: torchtitan\n"},
     ["--framework='megatron-core'", "disagrees", "torchtitan"]),
    # sp given false: torchtitan's own default with tp > 1 is sp=true (plan_defaults)
    _plan("torchtitan-async-tp-needs-sp", H100, "tp=8,gbs=8,sp=false,tp_comm_overlap=true",
          ["tp_comm_overlap=True", "torchtitan", "needs sp=true"], "--framework", "torchtitan"),
    _plan("flushes-on-megatron", H100, "pp=2,tp=4,gbs=8,flushes=2",
          ["flushes=2", "megatron-core", "one pipeline schedule"], "--framework",
          "megatron-core"),
    _plan("recompute-op-on-megatron", H100, "tp=8,gbs=16,recompute=op",
          ["recompute='op'", "megatron-core recomputes none, selective, full"],
          "--framework", "megatron-core"),
    _plan("schedule-the-stack-lacks", H100, "tp=2,pp=4,gbs=16,schedule=dualpipe",
          ["schedule='dualpipe'", "torchtitan runs gpipe"], "--framework", "torchtitan"),
    _plan("layout-the-stack-lacks", H100, "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*8L",
          ["layout='Et*8|t*8|t*8|t*8L'", "megatron-deepspeed cannot take"],
          "--framework", "megatron-deepspeed"),
    _plan("ep-overlap-the-stack-lacks", MOE, "ep=2,zero=3,gbs=16,ep_overlap=true",
          ["ep_overlap=True", "torchtitan has no"], "--framework", "torchtitan"),
    _plan("dispatcher-the-stack-lacks", MOE, "ep=2,zero=3,gbs=16,moe_dispatcher=hybridep",
          ["moe_dispatcher='hybridep'", "torchtitan runs the token dispatchers alltoall"],
          "--framework", "torchtitan"),
    _plan("hybrid-expert-grid-not-whole", MOE, "tp=1,ep=16,zero=1,gbs=16,dp_shard=8",
          ["dp_shard=8", "etp*ep = 1*16 must divide tp*cp*dp_shard = 1*1*8"]),
    _plan("hybrid-experts-the-stack-lacks", MOE, "tp=1,ep=2,zero=3,gbs=16,dp_shard=8",
          ["dp_shard=8", "jax-xla does not run hybrid sharding (dp_shard < dp) with expert"],
          "--framework", "jax-xla"),
    _plan("cuda-graph-the-stack-lacks", MOE, "ep=2,zero=3,gbs=16,cuda_graph=true",
          ["cuda_graph=True", "torchtitan has no full-iteration CUDA graph"],
          "--framework", "torchtitan"),
    _plan("export-the-stack-lacks", H100, "tp=8,gbs=16",
          ["--export='megatron'", "torchtitan is launched with --export torchtitan"],
          "--framework", "torchtitan", "--export", "megatron"),
    ("search-fix-schedule-the-stack-lacks",
     ["search", *H100, "--global-batch", "16", "--fix", "schedule=dualpipe", "--framework",
      "torchtitan", "--save-plan", "{d}/best.yaml", "--csv", "{d}/rows.csv"], {},
     ["--fix='schedule=dualpipe'", "torchtitan runs schedule gpipe"]),
    ("search-fix-recompute-the-stack-lacks",
     ["search", *H100, "--global-batch", "16", "--fix", "recompute=op", "--framework",
      "megatron-core"], {}, ["--fix='recompute=op'", "megatron-core runs recompute none"]),
    # plan fields
    _plan("flushes-zero", H100, "pp=2,tp=4,gbs=8,flushes=0", ["flushes=0", ">= 1"],
          "--framework", "torchtitan"),
    _plan("flushes-not-dividing", H100, "pp=2,tp=4,gbs=8,flushes=3",
          ["flushes=3", "must divide the 8 micro-batches"], "--framework", "torchtitan"),
    _plan("flushes-without-pp", H100, "tp=8,gbs=8,flushes=2", ["flushes=2", "pp > 1"],
          "--framework", "torchtitan"),
    ("flushes-float-in-file", ["estimate", *H100, "--plan", "{d}/p.yaml", "--framework",
                               "torchtitan"], {"p.yaml": "pp: 2\ntp: 4\ngbs: 8\nflushes: 2.5\n"},
     ["flushes=2.5", "integer"]),
    _plan("capacity-factor-zero", MOE, "ep=8,gbs=16,moe_capacity_factor=0",
          ["moe_capacity_factor=0.0", "> 0"]),
    _plan("capacity-factor-negative", MOE, "ep=8,gbs=16,moe_capacity_factor=-1",
          ["moe_capacity_factor=-1.0", "> 0"]),
    _plan("capacity-factor-infinite", MOE, "ep=8,gbs=16,moe_capacity_factor=inf",
          ["moe_capacity_factor=inf", "finite number > 0"]),
    _plan("capacity-factor-text", MOE, "ep=8,gbs=16,moe_capacity_factor=lots",
          ["moe_capacity_factor='lots'", "number"]),
    _plan("capacity-factor-on-dense", H100, "tp=8,gbs=16,moe_capacity_factor=1.2",
          ["moe_capacity_factor=1.2", "llama3-8b is dense"]),
    _plan("ep-overlap-without-ep", MOE, "tp=2,gbs=16,ep_overlap=true",
          ["ep_overlap=True", "needs ep > 1"]),
    _plan("ep-overlap-not-a-bool", MOE, "ep=8,gbs=16,ep_overlap=sure",
          ["ep_overlap='sure'", "true or false"]),
    _plan("ep-overlap-1f1b", MOE, "ep=4,pp=2,gbs=16,ep_overlap=true",
          ["ep_overlap=True", "schedule=interleaved"]),
    _plan("ep-overlap-full-recompute", MOE, "ep=8,gbs=16,ep_overlap=true,recompute=full",
          ["ep_overlap=True", "full recomputation"]),
    _plan("dispatcher-unknown", MOE, "ep=8,gbs=16,moe_dispatcher=nccl",
          ["moe_dispatcher='nccl'", "alltoall, deepep, hybridep"]),
    _plan("dispatcher-on-dense", H100, "tp=8,gbs=16,moe_dispatcher=deepep",
          ["moe_dispatcher='deepep'", "llama3-8b is dense"]),
    _plan("routing-on-dense", H100, "tp=8,gbs=16,moe_routing=contiguous",
          ["moe_routing='contiguous'", "llama3-8b is dense"]),
    _plan("routing-unknown", MOE, "ep=8,gbs=16,moe_routing=round",
          ["moe_routing='round'", "random, contiguous"]),
    ("dispatcher-not-text-in-file", ["estimate", *MOE, "--plan", "{d}/p.yaml"],
     {"p.yaml": "ep: 8\ngbs: 16\nmoe_dispatcher: [deepep]\n"},
     ["moe_dispatcher=['deepep']", "string"]),
    ("schedule-null-in-file", ["estimate", *H100, "--plan", "{d}/p.yaml"],
     {"p.yaml": "tp: 2\npp: 4\ngbs: 16\nschedule: null\n"}, ["schedule=None", "string"]),
    _plan("schedule-unknown", H100, "tp=2,pp=4,gbs=16,schedule=zb-h9",
          ["schedule='zb-h9'", "must be one of"]),
    _plan("zb-v-vpp3", H100, "tp=2,pp=4,gbs=16,schedule=zb-v,vpp=3",
          ["vpp=3", "schedule=zb-v", "vpp=2"]),
    _plan("dualpipe-odd-pp", ["--model", "llama3-8b", "--cluster", "dgx-h100:3"],
          "tp=8,pp=3,gbs=24,schedule=dualpipe", ["pp=3", "even pp"]),
    _plan("dualpipe-too-few-microbatches", H100, "tp=2,pp=4,gbs=4,schedule=dualpipe",
          ["num_microbatches=4", "2*pp=8"]),
    _plan("dualpipev-too-few-microbatches", H100, "tp=2,pp=4,gbs=4,schedule=dualpipev",
          ["num_microbatches=4", "2*pp=8"]),
    _plan("dualpipe-layers-per-stage", H100,
          "tp=2,pp=4,gbs=16,schedule=dualpipe,layers_per_stage=8/8/8/8",
          ["layers_per_stage='8/8/8/8'", "layout="]),
    _plan("interleaved-vpp-text", H100, "tp=2,pp=4,gbs=16,schedule=interleaved:x",
          ["vpp='x'", "integer"]),
    _plan("layers-per-stage-sum", H100, "tp=2,pp=4,gbs=16,layers_per_stage=8/8/8/7",
          ["layers_per_stage='8/8/8/7'", "must sum to num_layers=32"]),
    _plan("layers-per-stage-count", H100, "tp=2,pp=4,gbs=16,layers_per_stage=16/16",
          ["layers_per_stage='16/16'", "one layer count per pipeline stage (pp=4)"]),
    _plan("layers-per-stage-zero", H100, "tp=2,pp=4,gbs=16,layers_per_stage=0/16/8/8",
          ["layers_per_stage=0", ">= 1"]),
    _plan("layout-does-not-sum", H100, "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*7L",
          ["layout='Et*8|t*8|t*8|t*7L'", "num_layers=32", "not 31"]),
    _plan("layout-unknown-symbol", H100, "tp=2,pp=4,gbs=16,layout=Et*8|t*8|q*8|t*8L",
          ["layout=", "unknown symbol 'q'"]),
    _plan("layout-stage-count", H100, "tp=2,pp=4,gbs=16,layout=Et*16|t*16L",
          ["layout='Et*16|t*16L'", "4 stages", "not 2"]),
    _plan("layout-unclosed", H100, "tp=2,pp=4,gbs=16,layout=E(t*8|*4L",
          ["layout='E(t*8|*4L'", "without its ')'"]),
    _plan("layout-huge-repeat", H100, "tp=2,pp=4,gbs=16,layout=Et*99999999999|t*8|t*8|t*8L",
          ["layout=", "more than 65536 symbols"]),
    _plan("layout-empty-stage", H100, "tp=2,pp=4,gbs=16,layout=Et*16||t*16|L",
          ["layout=", "stage 1 empty"]),
    _plan("layout-mtp-on-a-model-without", H100, "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*8mL",
          ["layout=", "num_nextn_predict_layers=0", "not 1"]),
    _plan("layout-and-layers-per-stage", H100,
          "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*8L,layers_per_stage=8/8/8/8",
          ["layers_per_stage=(8, 8, 8, 8)", "cannot be combined with layout"]),
    _plan("first-stage-too-many", H100, "tp=2,pp=4,gbs=16,first_stage_layers=40",
          ["first_stage_layers=40", "leaves -8 layers"]),
    # model config.json fields
    _hf_case("first-k-dense-negative", {**DSV3, "first_k_dense_replace": -1},
             ["first_k_dense_replace=-1", ">= 0"]),
    _hf_case("first-k-dense-all-layers", {**DSV3, "first_k_dense_replace": 4},
             ["first_k_dense_replace=4", "leaves no MoE layer"]),
    _hf_case("mtp-layers-negative", {**DSV3, "num_nextn_predict_layers": -1},
             ["num_nextn_predict_layers=-1", ">= 0"]),
    _hf_case("mtp-layers-bool", {**DSV3, "num_nextn_predict_layers": True},
             ["num_nextn_predict_layers=True", "integer"]),
    _hf_case("n-group-not-dividing", {**DSV3, "n_group": 3, "topk_method": "noaux_tc"},
             ["n_group=3", "must divide num_experts=8"]),
    _hf_case("topk-group-too-large", {**DSV3, "n_group": 4, "topk_group": 5,
                                      "topk_method": "noaux_tc"},
             ["topk_group=5", "must be <= moe_router_num_groups=4"]),
    _hf_case("topk-method-unknown", {**DSV3, "topk_method": "magic"},
             ["topk_method='magic'", "greedy, group_limited_greedy, noaux_tc"]),
    _hf_case("experts-per-token-above-experts", {**DSV3, "num_experts_per_tok": 9},
             ["num_experts_per_tok=9", "num_experts=8"]),
    _hf_case("interleave-step-zero", {**LLAMA4, "interleave_moe_layer_step": 0},
             ["interleave_moe_layer_step=0", ">= 1"]),
    _hf_case("interleave-step-beyond-layers", {**LLAMA4, "interleave_moe_layer_step": 5},
             ["interleave_moe_layer_step=5", "leaves no MoE layer"]),
    _hf_case("interleave-step-text", {**LLAMA4, "interleave_moe_layer_step": "2"},
             ["interleave_moe_layer_step='2'", "integer"]),
    _hf_case("chunk-size-zero", {**LLAMA4, "attention_chunk_size": 0},
             ["attention_chunk_size=0", ">= 1"]),
    _hf_case("chunk-size-float", {**LLAMA4, "attention_chunk_size": 10.5},
             ["attention_chunk_size=10.5", "integer"]),
    # --dtype block formats and precisions
    _plan("mxfp8-on-a100", ["--model", "llama3-8b", "--cluster", "dgx-a100:1"], "tp=8,gbs=8",
          ["dtype='mxfp8'", "A100-SXM4-80GB", "no mxfp8 block-scaled tensor cores"],
          "--dtype", "mxfp8"),
    _gpu_case("nvfp4-on-a-custom-gpu-without", "fp8_tflops: 1800, block_formats: [mxfp8]",
              ["dtype='nvfp4'", "X has no nvfp4 block-scaled", "mxfp8"], dtype="nvfp4"),
    _plan("nvfp4-on-torchtitan", ["--model", "llama3-8b", "--cluster", "dgx-b200:1"],
          "tp=8,gbs=8", ["dtype='nvfp4'", "torchtitan runs --dtype"], "--dtype", "nvfp4",
          "--framework", "torchtitan"),
    _plan("dtype-unknown", H100, "tp=8,gbs=8", ["--dtype='FP8 '", "must be one of"],
          "--dtype", "FP8 "),
    # the other commands, and outputs that must not be written
    ("simulate-bad-flushes-no-trace", ["simulate", *H100, "--plan", "pp=2,tp=4,gbs=8,flushes=3",
                                       "--framework", "torchtitan", "--trace", "{d}/t.json",
                                       "--timeline", "{d}/t.png"], {},
     ["flushes=3", "must divide"]),
    ("simulate-nvfp4-json-no-trace", ["simulate", *H100, "--plan", "tp=8,gbs=8", "--dtype",
                                      "nvfp4", "--json", "--trace", "{d}/t.json"], {},
     ["dtype='nvfp4'", "H100-SXM5-80GB"]),
    ("compare-bad-capacity", ["compare", *MOE, "--plan", "ep=8,gbs=16,moe_capacity_factor=-2",
                              "--timeline", "{d}/c.png"], {},
     ["moe_capacity_factor=-2.0", "> 0"]),
    ("compare-stack-lacks-schedule", ["compare", *H100, "--plan", "tp=2,pp=4,gbs=16",
                                      "--schedules", "dualpipe", "--framework", "torchtitan"],
     {}, ["--schedules='dualpipe'", "torchtitan runs gpipe"]),
    ("whatif-every-variant-refused", ["whatif", "--model", "llama3-8b", "--cluster",
                                      "dgx-a100:1", "--global-batch", "16", "--vary",
                                      "nodes=1,2", "--dtype", "nvfp4", "--plot", "{d}/w.png"],
     {}, ["--vary='nodes=1, nodes=2'", "no variant has a feasible plan",
          "A100-SXM4-80GB has no nvfp4"]),
    ("whatif-unknown-framework", ["whatif", *H100, "--global-batch", "16", "--vary",
                                  "nodes=1,2", "--framework", "xx"], {},
     ["--framework='xx'", "unknown framework"]),
    ("search-bad-capacity-no-plan-file", ["search", *MOE, "--plan", "{d}/p.yaml",
                                          "--save-plan", "{d}/best.yaml"],
     {"p.yaml": "ep: 8\ngbs: 16\nmoe_capacity_factor: -1\n"},
     ["--plan='moe_capacity_factor=-1'", "must be a number > 0"]),
    ("search-unknown-plan-key", ["search", *MOE, "--plan",
                                 "ep=8,gbs=16,group_microbatches=8/8"], {},
     ["--plan='group_microbatches=8/8'", "not a key a search can fix", "estimate --plan"]),
    ("calibrate-bad-tp-no-profile", ["calibrate", "--backend", "fake", "--out", "{d}/gpu.yaml",
                                     "--tp", "0"], {}, ["--tp=0", ">= 1"]),
]

#: compare reports a schedule that does not fit on its own row (stdout) and exits 2 when none
#: fits (docs/cli.md): the one case whose stdout is not empty
STDOUT_REPORT = {"compare-stack-lacks-schedule"}

#: files a case names as outputs: none may exist after a refusal
OUTPUTS = ("t.json", "t.png", "c.png", "w.png", "best.yaml", "rows.csv", "gpu.yaml")


def test_cases_are_distinct_and_many():
    assert len({c[0] for c in CASES}) == len(CASES) >= 80


@pytest.mark.parametrize("name,argv,files,words", CASES, ids=[c[0] for c in CASES])
def test_recent_fields_refused_cleanly(tmp_path, capsys, name, argv, files, words):
    before = set(os.listdir(tmp_path))
    rc = main(materialise(tmp_path, argv, files))
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    assert out == "" or name in STDOUT_REPORT, out
    assert err.startswith("paraplan") and "error" in err and "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1, err          # one line
    for w in words:
        assert w in err, (w, err)
    left = set(os.listdir(tmp_path)) - before - set(files)
    assert not left, left                                               # nothing half-written
    assert not any((tmp_path / o).exists() for o in OUTPUTS if o not in files)


def test_good_neighbours_still_run(tmp_path, capsys):
    """The refusals are not over-eager: the same fields, valid, run."""
    (tmp_path / "config.json").write_text(json.dumps(DSV3), encoding="utf-8")
    (tmp_path / "p.yaml").write_text(PROFILE.format(gpu="H100", s="1.0e-5"), encoding="utf-8")
    (tmp_path / "c.yaml").write_text(_cluster("{profile: p.yaml}"), encoding="utf-8")
    for argv in (["estimate", *MOE, "--plan", "ep=8,gbs=16,moe_dispatcher=deepep,"
                  "moe_capacity_factor=1.5,moe_routing=contiguous"],
                 ["estimate", *H100, "--plan", "pp=2,tp=4,gbs=8,flushes=2",
                  "--framework", "torchtitan"],
                 ["estimate", *H100, "--plan", "tp=2,pp=4,gbs=16,layout=Et*8|t*8|t*8|t*8L"],
                 ["estimate", "--model", str(tmp_path / "config.json"), "--cluster",
                  "dgx-h100:1", "--plan", "gbs=8"],
                 ["estimate", "--model", "llama3-8b", "--cluster", str(tmp_path / "c.yaml"),
                  "--plan", "tp=8,gbs=8"]):
        assert main([*argv, "--json"]) == 0, capsys.readouterr().err
        json.loads(capsys.readouterr().out)


# --- the Python entry points: the same rules, as SpecError ---------------------------------

GPU = dict(name="X", bf16_tflops=900, hbm_gib=80, hbm_tbps=3.3)
MC = get_profile("megatron-core")

PYTHON_CASES = [
    ("gpu-exp-rate", lambda: gpu_from_mapping({**GPU, "exp_tera_per_s": -1}),
     "gpu.exp_tera_per_s", "> 0"),
    ("gpu-attention-efficiency", lambda: gpu_from_mapping({**GPU, "attention_efficiency": 0}),
     "gpu.attention_efficiency", "> 0"),
    ("gpu-unknown-key", lambda: gpu_from_mapping({**GPU, "exp_rate": 5}), "gpu",
     "unknown key"),
    ("framework-cp-impl", lambda: replace(MC, cp_impl="zigzag"), "framework.cp_impl",
     "ring, allgather, torch"),
    ("framework-amax-not-bool", lambda: replace(MC, te_amax_reduction="yes"),
     "framework.te_amax_reduction", "true or false"),
    ("framework-amax-int", lambda: replace(MC, te_amax_reduction=1),
     "framework.te_amax_reduction", "true or false"),
    ("framework-schedule-name", lambda: replace(MC, schedules=("zb-h9",)),
     "framework.schedules", "zb-v"),
    ("framework-dispatcher-name", lambda: replace(MC, moe_dispatchers=("nccl",)),
     "framework.moe_dispatchers", "alltoall, deepep, hybridep"),
    ("framework-expert-launch-type", lambda: replace(MC, expert_gemm_launch="loop"),
     "framework.expert_gemm_launch", "ExpertGemmLaunch"),
    ("expert-launch-kind", lambda: ExpertGemmLaunch(kind="loop9"),
     "framework.expert_gemm_launch.kind", "per_expert, multi_stream, fused"),
    ("expert-launch-streams", lambda: ExpertGemmLaunch(kind="multi_stream", streams=0),
     "framework.expert_gemm_launch.streams", ">= 1"),
    ("plan-capacity", lambda: plan_from_mapping({"moe_capacity_factor": 0}),
     "moe_capacity_factor", "> 0"),
    ("plan-flushes", lambda: plan_from_mapping({"flushes": -1}), "flushes", ">= 1"),
    ("plan-schedule-null", lambda: plan_from_mapping({"schedule": None}), "schedule",
     "string"),
    ("hf-n-group", lambda: model_from_hf({**DSV3, "n_group": 3, "topk_method": "noaux_tc"}),
     "n_group", "must divide"),
    ("hf-topk-method", lambda: model_from_hf({**DSV3, "topk_method": "top1"}), "topk_method",
     "noaux_tc"),
]


@pytest.mark.parametrize("name,call,field,rule", PYTHON_CASES, ids=[c[0] for c in PYTHON_CASES])
def test_python_entry_points_raise_spec_error(name, call, field, rule):
    with pytest.raises(SpecError) as e:
        call()
    assert e.value.field == field and rule in str(e.value), str(e.value)


def test_a_sample_as_a_real_process(tmp_path):
    """The process itself: exit status 2, one line on stderr, nothing on stdout or disk."""
    by_name = {c[0]: c for c in CASES}
    for case in ("profile-unknown-gpu", "search-fix-schedule-the-stack-lacks"):
        _, argv, files, words = by_name[case]
        sub = tmp_path / case
        sub.mkdir()
        p = subprocess.run([sys.executable, "-m", "simulator.cli",
                            *materialise(sub, argv, files)], cwd=ROOT, text=True,
                           capture_output=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
        assert "Traceback" not in p.stderr and all(w in p.stderr for w in words), p.stderr
        assert sorted(os.listdir(sub)) == sorted(files)

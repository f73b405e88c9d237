"""Time the grouped expert GEMMs of the MoE presets on this machine's GPU (needs PyTorch and a
CUDA GPU; run on hardware, docs/calibration.md §7.5).

For each MoE preset, ``E/ep`` local experts (``--ep``) each given ``m`` tokens (``--tokens``,
balanced routing), the six expert GEMMs of a layer: fc1 (``2·f`` outputs with a gated MLP, else
``f``) and fc2, each in its forward ``(m, N, K)``, data-gradient ``(m, K, N)`` and
weight-gradient ``(K, N, m)`` pass. Three ways, each the median of ``REPS`` CUDA-event timed
samples after ``WARMUP`` calls, timed by calibrate's own ``TorchBackend.time_call`` (operands
resident; runs 1, 2 and 5 of docs/measurements/h200_2026-11-29 used a copy of it that
capped the calls a sample at 200, not 1,000):

* ``grouped``: one ``torch._grouped_mm`` over the experts (torchtitan's grouped kernel; TE's
  ``GroupedLinear`` under Megatron-Core runs one cuBLAS GEMM per expert on 4 streams on Hopper
  unless ``NVTE_USE_CUTLASS_GROUPED_GEMM=1``, docs/calibration.md §5.42, §5.123); None where
  this torch has no such op or refuses the layout;
* ``loop``: the experts' GEMMs as ``torch.matmul`` one after another from Python, on one stream
  (the ``per_expert`` launch rule's class; host-bound where a GEMM takes less than a launch);
* ``dense``: one GEMM of all the experts' rows, ``(E/ep·m, N, K)`` (forward and data
  gradient only; the weight gradient has no such single-GEMM form);
* with ``--streams``: ``streams4`` (TE's issue order: a cuBLAS GEMM per expert round-robin on
  4 streams), eager and replayed from a CUDA graph, and ``loop`` replayed from a graph.

Writes one JSON object (``--out``; stdout without it): device, software, and one record per
(model, pass, m) with the three times in seconds and the FLOPs.

    python experiments/grouped_gemm_probe.py --out grouped_gemm.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulator.calibrate.torch_backend import TorchBackend  # noqa: E402
from strategies.hf_config import load_model_arg  # noqa: E402
from experiments._report import emit_json  # noqa: E402

MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "mixtral-8x22b", "gpt-oss-120b")
WARMUP, REPS = 3, 9


def expert_dims(name: str) -> tuple[int, int, int, bool]:
    """(experts, hidden, expert ffn, gated) of a preset."""
    m = load_model_arg(name)
    f = m.moe_ffn_hidden_size or m.ffn_hidden_size
    return m.num_experts, m.hidden_size, f, m.gated


def grouped_call(torch, g: int, m: int, n: int, k: int, wgrad: bool):
    """A ``torch._grouped_mm`` call of ``g`` groups; None where unavailable."""
    op = getattr(torch, "_grouped_mm", None)
    if op is None:
        return None
    dev, bf = "cuda", torch.bfloat16
    if not wgrad:   # (g·m, k) @ (g, k, n) -> (g·m, n), groups split the rows
        a = torch.randn(g * m, k, device=dev, dtype=bf)
        b = torch.randn(g, n, k, device=dev, dtype=bf).transpose(-2, -1)
        offs = torch.arange(m, g * m + 1, m, device=dev, dtype=torch.int32)
        return lambda: op(a, b, offs=offs, out_dtype=bf)
    # weight gradient: (k, g·m) @ (g·m, n) -> (g, k, n), groups split the contraction
    a = torch.randn(k, g * m, device=dev, dtype=bf)
    b = torch.randn(n, g * m, device=dev, dtype=bf).t()
    offs = torch.arange(m, g * m + 1, m, device=dev, dtype=torch.int32)
    return lambda: op(a, b, offs=offs, out_dtype=bf)


def graphed(torch, fn):
    """``fn`` captured once in a CUDA graph: its replay (no host launch cost)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def stream_variants(torch, time, loop, xs, ws, outs, streams: int = 4) -> dict:
    """The experts' GEMMs as Transformer Engine's ``GroupedLinear`` issues them on Hopper
    (``nvte_multi_tensor_gemm``: one cuBLAS GEMM per expert, round-robin over ``streams``
    side streams that wait on the main stream and are waited on at the end), from Python
    (``streams4_s``) and replayed from a CUDA graph (``streams4_graph_s``: the GPU side alone);
    and the one-stream loop replayed from a graph (``loop_graph_s``)."""
    side = [torch.cuda.Stream() for _ in range(streams)]

    def multi():
        cur = torch.cuda.current_stream()
        for s_ in side:
            s_.wait_stream(cur)
        for i, (x, w, o) in enumerate(zip(xs, ws, outs)):
            with torch.cuda.stream(side[i % streams]):
                torch.matmul(x, w, out=o)
        for s_ in side:
            cur.wait_stream(s_)
    out = {"streams4_s": time(multi)}
    for name, fn in (("streams4_graph_s", multi), ("loop_graph_s", loop)):
        try:
            out[name] = time(graphed(torch, fn))
        except RuntimeError as e:
            out[name], out[name + "_error"] = None, str(e).splitlines()[0][:200]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--ep", type=int, default=8)
    ap.add_argument("--tokens", default="128,512,2048")
    ap.add_argument("--model", action="append", default=None)
    ap.add_argument("--streams", action="store_true",
                    help="also time TE's 4-stream issue order, eager and graph-replayed, and "
                    "the one-stream loop graph-replayed")
    a = ap.parse_args()
    import torch
    time = TorchBackend(warmup=WARMUP, reps=REPS).time_call
    dev, bf = "cuda", torch.bfloat16
    recs = []
    for name in a.model or MODELS:
        E, h, f, gated = expert_dims(name)
        g = max(1, E // a.ep)
        for fc, (N, K) in (("fc1", ((2 if gated else 1) * f, h)), ("fc2", (h, f))):
            for m in (int(t) for t in a.tokens.split(",")):
                for pas, (M_, N_, K_) in (("fwd", (m, N, K)), ("dgrad", (m, K, N)),
                                          ("wgrad", (K, N, m))):
                    rec = {"model": name, "experts_local": g, "fc": fc, "pass": pas,
                           "tokens_per_expert": m, "m": M_, "n": N_, "k": K_,
                           "flops": 2.0 * g * M_ * N_ * K_}
                    wgrad = pas == "wgrad"
                    try:
                        call = grouped_call(torch, g, m, N_ if not wgrad else N,
                                            K_ if not wgrad else K, wgrad)
                        rec["grouped_s"] = time(call) if call else None
                    except (RuntimeError, TypeError, ValueError) as e:
                        rec["grouped_s"], rec["grouped_error"] = None, str(e).splitlines()[0][:200]
                    xs = [torch.randn(M_, K_, device=dev, dtype=bf) for _ in range(g)]
                    ws = [torch.randn(K_, N_, device=dev, dtype=bf) for _ in range(g)]
                    outs = [torch.empty(M_, N_, device=dev, dtype=bf) for _ in range(g)]

                    def loop():
                        for x, w, o in zip(xs, ws, outs):
                            torch.matmul(x, w, out=o)
                    rec["loop_s"] = time(loop)
                    if a.streams:
                        rec.update(stream_variants(torch, time, loop, xs, ws, outs))
                    if not wgrad:
                        x = torch.randn(g * M_, K_, device=dev, dtype=bf)
                        w = torch.randn(K_, N_, device=dev, dtype=bf)
                        o = torch.empty(g * M_, N_, device=dev, dtype=bf)
                        rec["dense_s"] = time(lambda: torch.matmul(x, w, out=o))
                    recs.append(rec)
                    del xs, ws, outs
                    torch.cuda.empty_cache()
                    print(json.dumps(rec), flush=True)
    doc = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": str(torch.version.cuda), "ep": a.ep, "warmup": WARMUP, "reps": REPS,
           "records": recs}
    emit_json(doc, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

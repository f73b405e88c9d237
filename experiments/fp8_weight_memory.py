"""The model states of an FP8 run under Megatron-Core, switch by switch (docs/calibration.md
§5.151): a reference row's modelled peak with its stated ``quantised_weights`` (FP8-stored
weights, ``fp8_param_gather``) and ``grad_buffer_bytes`` (``grad_reduce_in_fp32 = False``)
each turned off, and the delayed-scaling amax histories the model leaves out.

Run (a few seconds):

    python experiments/fp8_weight_memory.py [ROW_ID [REFERENCE_FILE]]
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from simulator.studies.validate import load_cases                      # noqa: E402
from strategies.cost import param_counts                               # noqa: E402
from strategies.cost.quantise import weight_cast_bytes                 # noqa: E402
from strategies.cost.system import get_system                          # noqa: E402
from strategies.job import make_job                                    # noqa: E402
from strategies.memory.scalar import peak_memory                       # noqa: E402

ROW, FILE = "dgxc2505_nemotronh_56b_h100_32_fp8", "hybrid_2026.json"
#: Transformer Engine's ``DelayedScaling`` per GEMM: fp32 amax histories of three forward
#: (input, weight, output) and two backward (grad output, grad input) tensors
#: (``fp8_meta["scaling_fwd"/"scaling_bwd"].amax_history``), ``fp8_amax_history_len``
#: 1024 in NeMo's ``bf16_with_fp8_mixed``
AMAX_TENSORS, AMAX_LEN = 5, 1024


def main(row: str = ROW, name: str = FILE) -> int:
    """Print ``row``'s peak (of reference file ``name``) under each switch; 1 if not priced."""
    cases = [c for c in load_cases(os.path.join(ROOT, "strategies/reference/data", name), None)
             if c.raw.get("id") == row and c.job is not None]
    if not cases:
        print(f"{row}: no such priced reference row")
        return 1
    job = cases[0].job
    sy = job.system
    print(f"{row}: {job.dtype}, {job.cluster.gpu.name} "
          f"({job.cluster.gpu.hbm_bytes / 2**30:.1f} GiB), stated quantised_weights="
          f"{sy.quantised_weights:g}, grad_buffer_bytes={sy.grad_buffer_bytes:g}")
    print(f"{'switches':28s} {'peak':>8s} {'params':>8s} {'grads':>8s} {'optim':>8s} "
          f"{'acts':>8s} {'other':>8s}  GiB")
    for name, s in (("16-bit weights, fp32 grads", replace(sy, quantised_weights=0.0,
                                                           grad_buffer_bytes=0.0)),
                    ("FP8 weights, fp32 grads", replace(sy, grad_buffer_bytes=0.0)),
                    ("16-bit weights, bf16 grads", replace(sy, quantised_weights=0.0)),
                    ("as stated", sy)):
        j = make_job(job.model, job.cluster, job.plan, dtype=job.dtype,
                     framework=job.framework, system=s)
        g = peak_memory(j)[1].to_gib_dict()
        print(f"{name:28s} " + " ".join(f"{g[k]:8.3f}" for k in (
            "peak_gib", "params_gib", "grads_gib", "optimizer_gib", "activations_gib",
            "other_gib")))
    m = job.model
    # TE GEMM modules per layer: a hybrid layer is one block (Mamba in/out projections,
    # attention QKV/proj or MLP fc1/fc2: two), a transformer layer two blocks (four); MoE
    # experts' grouped GEMMs are left out (a count, not a claim, for dense models)
    gemms = 2 * m.num_layers * (1 if m.hybrid_pattern else 2)
    amax = gemms * AMAX_TENSORS * AMAX_LEN * 4
    print(f"delayed scaling's amax histories (not modelled; the whole model's, a rank holds "
          f"at most these): {gemms} GEMMs x {AMAX_TENSORS} x {AMAX_LEN} x 4 B = "
          f"{amax / 2**20:.2f} MiB")
    # what the step-time model still charges per step for casting the 16-bit weights
    d, e = param_counts.layer_params_split(m, job.plan.tp, job.plan.ep, job.plan.etp)
    w = (d + e) * m.num_layers / job.plan.pp
    cast = weight_cast_bytes(w, job.cluster.gpu, job.dtype)
    rate = job.cluster.gpu.hbm_bandwidth * get_system(sy).hbm_efficiency
    print(f"per-step weight cast the step-time model charges: {w:.3g} layer weights, "
          f"{cast / 1e9:.1f} GB of HBM traffic, {cast / rate * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

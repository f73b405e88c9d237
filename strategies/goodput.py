"""Goodput of a training run under failures: checkpoint/restart with exponential failures.

The model (docs/goodput.md). The job fails as a Poisson process of rate
``1/M`` while it runs, ``M = job_mtbf_s`` (every GPU and every node fails independently, and
one failure stops the synchronous job). Work is cut into segments of ``tau`` seconds of
compute, each closed by a blocking checkpoint write of ``delta`` seconds. A failure loses the
segment in progress (the work since the last complete checkpoint, and the write if it was
writing) and costs ``restart`` seconds (reschedule, reload, re-warm) during which no failure
is counted. Then the expected wall time of one segment of ``w`` seconds of work is exactly

    E[T(w)] = (M + R) · (exp((w + delta) / M) − 1)

(a geometric number of failed attempts, each losing a truncated-exponential time plus ``R``),
and the goodput fraction is ``tau / E[T(tau)]``. Young (1974) and Daly (2006) give the
``tau`` that maximises it to first and higher order.

Default failure rates (``LLAMA3_*``) are Meta's Llama 3 405B pre-training: 419 unexpected
interruptions in a 54-day snapshot on 16,384 H100 GPUs (2,048 eight-GPU hosts), The Llama 3
Herd of Models (2024), §3.3.4, Table 5. Of the 419, the causes Table 5 files under *GPU*
(faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent data corruption 6,
thermal interface + sensor 6) are 268; the other 151 (software bugs 54, network switch/cable
35, host maintenance 32, NIC 7, NCCL watchdog 7, SSD 3, power supply 3, chassis, IO board,
dependency, CPU, system memory 2 each) are counted per host. The default checkpoint write
bandwidth is the same paper's storage (Tectonic, §3.3.1): 2 TB/s sustained for the 16K-GPU
job, i.e. ``2e12 / 16384`` bytes/s per GPU. The default restart time (10 minutes) is an
assumption: the paper gives no figure; override it.

Units: seconds, bytes, bytes/s; hours only where a name says so.

>>> round(young_interval(60.0, 3 * 3600.0), 3)
1138.42
>>> round(goodput_fraction(600.0, 60.0, 3 * 3600.0, 600.0), 4)
0.8352
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.errors import SpecError
from strategies.cost.system import SystemConfig
from strategies.framework import get_profile
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.limits import check_int, check_number

HOUR_S = 3600.0
# Llama 3 405B, 54-day pre-training snapshot (The Llama 3 Herd of Models, 2024, Table 5)
LLAMA3_GPUS = 16_384
LLAMA3_GPUS_PER_NODE = 8
LLAMA3_DAYS = 54.0
LLAMA3_INTERRUPTIONS = 419
LLAMA3_GPU_CAUSES = {"faulty GPU": 148, "GPU HBM3 memory": 72, "GPU SRAM memory": 19,
                     "GPU system processor": 17, "silent data corruption": 6,
                     "GPU thermal interface + sensor": 6}
LLAMA3_HOST_CAUSES = {"software bug": 54, "network switch/cable": 35, "host maintenance": 32,
                      "NIC": 7, "NCCL watchdog timeouts": 7, "SSD": 3, "power supply": 3,
                      "server chassis": 2, "IO expansion board": 2, "dependency": 2, "CPU": 2,
                      "system memory": 2}
_SNAPSHOT_H = LLAMA3_DAYS * 24.0
#: GPU-hours per GPU-attributed interruption (about 79,000 h, 9 years)
DEFAULT_MTBF_GPU_H = LLAMA3_GPUS * _SNAPSHOT_H / sum(LLAMA3_GPU_CAUSES.values())
#: host-hours per other interruption (about 17,600 h, 2 years)
DEFAULT_MTBF_NODE_H = (LLAMA3_GPUS // LLAMA3_GPUS_PER_NODE) * _SNAPSHOT_H \
    / sum(LLAMA3_HOST_CAUSES.values())
#: checkpoint write bandwidth per GPU: Tectonic's 2 TB/s sustained shared by 16,384 GPUs
DEFAULT_CKPT_BW_PER_GPU = 2e12 / LLAMA3_GPUS
#: restart, reload and re-warm after a failure (an assumption; no published figure)
DEFAULT_RESTART_S = 600.0
#: a segment longer than this many job MTBFs is refused (exp overflows near 709)
MAX_SEGMENT_MTBFS = 500.0
#: the Monte-Carlo sampler draws failures one by one: at most this many expected per run
MAX_SAMPLED_FAILURES = 100_000
#: a run cut into more checkpoint segments than this is refused (a sanity limit: a
#: checkpoint every 1e-300 s made ``work / interval`` infinite, and ``ceil`` raised)
MAX_SEGMENTS = 10 ** 12




def _pos(field: str, v: Any) -> float:
    return check_number(field, v, 0.0, None, lo_open=True)


def job_mtbf_s(num_gpus: int, num_nodes: int, mtbf_gpu_h: float = DEFAULT_MTBF_GPU_H,
               mtbf_node_h: float = DEFAULT_MTBF_NODE_H) -> float:
    """Seconds between failures of a job on ``num_gpus`` GPUs in ``num_nodes`` nodes: the
    rates add, ``1/M = N_gpu/MTBF_gpu + N_node/MTBF_node``.

    >>> round(job_mtbf_s(LLAMA3_GPUS, LLAMA3_GPUS // 8) / HOUR_S, 3)   # 54 days / 419
    3.093
    """
    check_int("num_gpus", num_gpus)
    check_int("num_nodes", num_nodes)
    rate = num_gpus / _pos("mtbf_gpu_h", mtbf_gpu_h) + num_nodes / _pos("mtbf_node_h", mtbf_node_h)
    return HOUR_S / rate


def checkpoint_bytes_per_param(framework: FrameworkProfile | str | None = None,
                               system: SystemConfig | None = None) -> float:
    """Bytes per parameter of one training checkpoint under stack ``framework``: the
    persistent model state the memory model counts, once. It is read off
    ``memory.scalar.model_state_bytes_per_param`` at ZeRO-3 with one rank (a fully sharded
    job holds exactly one copy of each persistent state over its ranks, no replica), with the
    stack's facts as memory reads them (``memory.stack_terms.stack_memory``: its system,
    optimizer state bytes and ``fsdp2``): ``params + optimizer``; gradients are not saved.
    Megatron-Core's distributed checkpoint: bf16 weights + fp32 master + Adam m, v, ``2 + 12 = 14``; torchtitan (FSDP2
    over an fp32 model, DCP): the fp32 sharded parameter is the master, ``4 + 8 = 12`` (no
    16-bit copy: the gathered bf16 weights are transient); Composer (FSDP1 over an fp32 model,
    the same state) ``4 + 8 = 12``; MaxText (fp32 weights only, ``master_only``; Orbax saves
    params and opt_state) ``0 + 12 = 12``; NeMo AutoModel (a bf16-built model, safetensors
    model + DCP optimizer): ``2 + 2 + 2 = 6``; HAI-LLM (BF16 moments): ``2 + 8``
    (docs/calibration.md §5.43, §5.46).

    >>> [checkpoint_bytes_per_param(s) for s in ("megatron-core", "torchtitan", "automodel",
    ...                                           "hai-llm", "pytorch-eager", "jax-xla")]
    [14.0, 12.0, 6.0, 10.0, 12.0, 12.0]
    """
    from strategies.memory.scalar import model_state_bytes_per_param
    from strategies.memory.stack_terms import stack_memory
    # the stack's terms as the memory model reads them (the precision and the chip enter
    # none of the three read here)
    terms = stack_memory(get_profile(framework), "bf16", False, system)
    params, _grads, optimizer = model_state_bytes_per_param(
        3, 1, optimizer_bytes=terms.optimizer_bytes, system=terms.system, fsdp2=terms.fsdp2)
    return params + optimizer


def checkpoint_bytes(model: ModelSpec, framework: FrameworkProfile | str | None = None,
                     system: SystemConfig | None = None) -> float:
    """Bytes of one full training checkpoint: every parameter once (data-parallel copies are
    written once) at ``checkpoint_bytes_per_param`` of the stack."""
    return float(model.num_params()) * checkpoint_bytes_per_param(framework, system)


def checkpoint_write_s(nbytes: float, write_bandwidth: float) -> float:
    """Seconds to write ``nbytes`` at ``write_bandwidth`` bytes/s (blocking)."""
    return check_number("checkpoint_bytes", nbytes, 0.0) / _pos("ckpt_bw", write_bandwidth)


def young_interval(delta: float, mtbf: float) -> float:
    """Young (1974): compute seconds between checkpoints ``sqrt(2·delta·M)``."""
    return math.sqrt(2.0 * _pos("checkpoint_write_s", delta) * _pos("job_mtbf_s", mtbf))


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly (2006), eq. 37: ``sqrt(2δM)·[1 + sqrt(δ/2M)/3 + (δ/2M)/9] − δ`` for ``δ < 2M``,
    else ``M``; the higher-order optimum of the same model."""
    d, m = _pos("checkpoint_write_s", delta), _pos("job_mtbf_s", mtbf)
    if d >= 2.0 * m:
        return m
    x = d / (2.0 * m)
    return math.sqrt(2.0 * d * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - d


def expected_segment_s(work: float, delta: float, mtbf: float, restart: float) -> float:
    """Expected wall seconds to complete ``work`` seconds of compute and its checkpoint
    (``delta``) under failures: ``(M + R)·(exp((w + δ)/M) − 1)`` (see the module doc)."""
    m = _pos("job_mtbf_s", mtbf)
    s = check_number("work_s", work, 0.0) + check_number("checkpoint_write_s", delta, 0.0)
    if s / m > MAX_SEGMENT_MTBFS:
        raise SpecError("segment_s", s, f"is {s / m:.3g} times the job MTBF ({m:.3g} s): the "
                        "run would practically never finish (checkpoint more often, write "
                        "faster or fail less)")
    return (m + check_number("restart_s", restart, 0.0)) * math.expm1(s / m)


def expected_lost_work_s(segment: float, mtbf: float) -> float:
    """Expected seconds lost by one failure that strikes a segment of ``segment`` seconds
    (compute + write): the mean of an exponential truncated to ``[0, s)``,
    ``M − s/(exp(s/M) − 1)`` (→ ``s/2`` when ``s ≪ M``)."""
    s, m = _pos("segment_s", segment), _pos("job_mtbf_s", mtbf)
    return m - s / math.expm1(s / m)


def goodput_fraction(interval: float, delta: float, mtbf: float, restart: float) -> float:
    """Expected share of wall time spent on useful compute with checkpoints every
    ``interval`` seconds of compute: ``tau / E[T(tau)]``."""
    tau = _pos("checkpoint_interval_s", interval)
    return tau / expected_segment_s(tau, delta, mtbf, restart)


def full_segments(work: float, interval: float) -> int:
    """Full checkpoint segments of ``interval`` compute seconds in a run of ``work`` (the
    last, partial one not counted): ``ceil(work / interval) − 1``, at most ``MAX_SEGMENTS``."""
    w, tau = check_number("work_s", work, 0.0), _pos("checkpoint_interval_s", interval)
    n = w / tau
    if n > MAX_SEGMENTS:
        raise SpecError("checkpoint_interval_s", tau, f"cuts {w:.6g} s of compute into "
                        f"{n:.3g} segments; at most {MAX_SEGMENTS:.0e} (a sanity limit)")
    return max(math.ceil(n) - 1, 0)


def expected_run_s(work: float, interval: float, delta: float, mtbf: float,
                   restart: float) -> float:
    """Expected wall seconds of a whole run of ``work`` compute seconds: ``k`` full segments
    of ``interval`` and a last one of the rest, each closed by a checkpoint; a SpecError when
    it overflows a float."""
    w, tau = check_number("work_s", work, 0.0), _pos("checkpoint_interval_s", interval)
    full = full_segments(w, tau)
    last = w - full * tau
    wall = full * expected_segment_s(tau, delta, mtbf, restart) + \
        expected_segment_s(last, delta, mtbf, restart)
    if not math.isfinite(wall):
        raise SpecError("restart_s", restart, f"with a job MTBF of {mtbf:.3g} s, the expected "
                        "wall time overflows a float (no run lasts that long)")
    return wall


def sample_run_s(work: float, interval: float, delta: float, mtbf: float, restart: float,
                 runs: int, seed: int) -> np.ndarray:
    """Wall seconds of ``runs`` sampled runs (seeded, deterministic): failures are drawn one by
    one as exponential gaps of running time, each one rolls the run back to its last complete
    checkpoint and adds ``restart``. Independent of the closed form it checks."""
    w, tau = check_number("work_s", work, 0.0), _pos("checkpoint_interval_s", interval)
    m, d = _pos("job_mtbf_s", mtbf), check_number("checkpoint_write_s", delta, 0.0)
    r = check_number("restart_s", restart, 0.0)
    check_int("monte_carlo", runs, 1, 10_000_000)
    full = full_segments(w, tau)
    s_full, s_last = tau + d, (w - full * tau) + d
    expected = _expected_failures(w, tau, d, m)
    if expected > MAX_SAMPLED_FAILURES:
        raise SpecError("monte_carlo", runs, f"each run expects {expected:.3g} failures; the "
                        f"sampler draws at most {MAX_SAMPLED_FAILURES:,} (use the closed form)")
    rng = np.random.default_rng(check_int("seed", seed, 0))
    done = np.zeros(runs, dtype=np.int64)       # full segments completed
    wall = np.zeros(runs)
    active = np.arange(runs)
    while active.size:
        gap = rng.exponential(m, active.size)
        k = np.minimum(np.floor(gap / s_full).astype(np.int64), full - done[active])
        rest = gap - k * s_full
        done[active] += k
        finished = (done[active] == full) & (rest >= s_last)
        wall[active] += np.where(finished, k * s_full + s_last, gap + r)
        active = active[~finished]
    return wall


@dataclass(frozen=True)
class GoodputReport:
    """Everything ``paraplan goodput`` prints (seconds, bytes, bytes/s, GPU-hours)."""

    step_time_s: float
    steps: int
    compute_s: float
    num_gpus: int
    job_mtbf_s: float
    checkpoint_bytes: float
    checkpoint_bw: float
    checkpoint_write_s: float
    restart_s: float
    checkpoint_interval_s: float
    young_interval_s: float
    expected_lost_work_s: float
    goodput_fraction: float
    expected_failures: float
    expected_wall_s: float
    expected_gpu_hours: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def goodput_report(step_time_s: float, tokens: int, tokens_per_step: int, num_gpus: int,
                   num_nodes: int, ckpt_bytes: float, *, mtbf_gpu_h: float = DEFAULT_MTBF_GPU_H,
                   mtbf_node_h: float = DEFAULT_MTBF_NODE_H, ckpt_bw: float | None = None,
                   restart_s: float = DEFAULT_RESTART_S,
                   interval_s: float | None = None) -> GoodputReport:
    """The expected cost of training ``tokens`` tokens at ``step_time_s`` per step of
    ``tokens_per_step``; checkpoints every Daly interval unless ``interval_s`` is given;
    ``ckpt_bw`` defaults to ``DEFAULT_CKPT_BW_PER_GPU · num_gpus``."""
    step = _pos("step_time_s", step_time_s)
    steps = math.ceil(check_int("tokens", tokens) / check_int("tokens_per_step", tokens_per_step))
    bw = DEFAULT_CKPT_BW_PER_GPU * num_gpus if ckpt_bw is None else _pos("ckpt_bw", ckpt_bw)
    m = job_mtbf_s(num_gpus, num_nodes, mtbf_gpu_h, mtbf_node_h)
    delta = checkpoint_write_s(ckpt_bytes, bw)
    r = check_number("restart_s", restart_s, 0.0)
    tau = daly_interval(delta, m) if interval_s is None else _pos("checkpoint_interval_s",
                                                                   interval_s)
    work = steps * step
    wall = expected_run_s(work, tau, delta, m, r)
    return GoodputReport(
        step_time_s=step, steps=steps, compute_s=work, num_gpus=num_gpus, job_mtbf_s=m,
        checkpoint_bytes=ckpt_bytes, checkpoint_bw=bw, checkpoint_write_s=delta, restart_s=r,
        checkpoint_interval_s=tau, young_interval_s=young_interval(delta, m),
        expected_lost_work_s=expected_lost_work_s(tau + delta, m),
        goodput_fraction=goodput_fraction(tau, delta, m, r),
        expected_failures=_expected_failures(work, tau, delta, m),
        expected_wall_s=wall, expected_gpu_hours=wall * num_gpus / HOUR_S)


def _expected_failures(work: float, tau: float, delta: float, m: float) -> float:
    """Expected failures over the run: ``exp(s/M) − 1`` per segment."""
    full = full_segments(work, tau)
    return full * math.expm1(min((tau + delta) / m, MAX_SEGMENT_MTBFS)) + \
        math.expm1(min((work - full * tau + delta) / m, MAX_SEGMENT_MTBFS))


def summarize_samples(wall: np.ndarray, work: float, bins: int = 10) -> dict[str, Any]:
    """Mean, standard deviation, 95 % confidence interval of the mean, percentiles and a
    histogram of sampled wall times (seconds), with the goodput of each."""
    n = wall.size
    mean, std = float(wall.mean()), float(wall.std(ddof=1)) if n > 1 else 0.0
    half = 1.959964 * std / math.sqrt(n)
    counts, edges = np.histogram(wall, bins=bins)
    p5, p50, p95 = (float(x) for x in np.percentile(wall, [5, 50, 95]))
    return {"runs": n, "mean_wall_s": mean, "std_wall_s": std,
            "ci95_wall_s": [mean - half, mean + half],
            "p5_wall_s": p5, "p50_wall_s": p50, "p95_wall_s": p95,
            "mean_goodput_fraction": float(np.mean(work / wall)),
            "histogram": {"edges_s": [float(e) for e in edges],
                          "counts": [int(c) for c in counts]}}

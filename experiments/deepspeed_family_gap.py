#!/usr/bin/env python
"""The megatron-deepspeed family against its control, Megatron-LM 2021 (docs/calibration.md
§5.133).

Run (a few seconds, analytic only):

    python experiments/deepspeed_family_gap.py

First table (the difference analysis): each pipelined DeepSpeed row beside the
``megatron-lm-2021`` row nearest to it (same GPUs and cluster; MT-NLG 530B at 2,240 GPUs is
the same model, tp 8 pp 35 dp 8 mbs 1 on Selene as Narayanan et al.'s Table 2 PTD-P row),
``estimate(job).breakdown_s`` term by term, then the step over its pipeline's slots
``m + p − 1`` (a slot is one micro-batch's forward and backward on a stage, the bubble
included), estimated and measured.

Second table: what DeepSpeed v0.5.10's pipeline engine does per micro-batch that the model does
not charge (``runtime/pipe/engine.py``; ``per_microbatch_engine_s``), on the middle rank that
bounds the steady state, times the ``m`` micro-batches; then, as a what-if (off by default
in DeepSpeed and in Megatron-DeepSpeed, no row states it), ``partition_activations``'
all-gather of each checkpoint before its recomputation (``partition_activations_s``); each
against the row's miss (measured less estimated step).

Third table: the reading the rows leave open, the micro-batch size (Sec. 2.4 of the MT-NLG
paper and Sec. 2.3 of GLM-130B's do not state it): the estimate at mbs 1, 2 and 4.
"""
from __future__ import annotations

import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from strategies.cost import comm as cm  # noqa: E402
from strategies.cost.stage import stage_costs  # noqa: E402
from strategies.estimate.scalar import estimate  # noqa: E402
from strategies.job import Job  # noqa: E402
from strategies.reference.cases import Case, case_from_entry, load_reference  # noqa: E402

FILES = ("published.json", "classic_papers.json")
#: (DeepSpeed row, its megatron-lm-2021 control)
PAIRS = (("mtnlg_530b_2240gpu", "narayanan2021_t2_ptdp_530B_2240gpu"),
         ("glm_130b_768gpu", "narayanan2021_t2_ptdp_175B_768gpu"),
         ("bloom_prequel_181B_dp4_pp12_mbs1", "narayanan2021_t2_ptdp_175B_384gpu"))
TERMS = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "optimizer")

#: ``PartitionedTensor`` clones and copies per micro-batch on a middle rank (v0.5.10
#: ``runtime/pipe/engine.py``), each a read and a write of the 1/t partition of one stage
#: boundary's activation: ``_exec_recv_activations`` ``recvd = buffer.clone()`` (l. 1033),
#: ``_exec_forward_pass`` ``inputs = tuple(t.clone() ...)`` (l. 608), the output's
#: ``PartitionedTensor(...)`` (l. 648, ``_partition_tensor``'s clone), ``_exec_send_grads``'
#: ``PartitionedTensor(tensor=first_input.grad)`` (l. 966)
ENGINE_PARTITION_COPIES = 4
#: host synchronisations per micro-batch on a middle rank: ``_exec_forward_pass``'s
#: ``self.tput_timer.start()`` (l. 604; ``utils/timer.py`` ``ThroughputTimer.start``, l.
#: 161-166, ``torch.cuda.synchronize()`` from the third step on) and
#: ``PartitionedTensor.from_meta``'s ``meta.tolist()`` for the forward's input (l. 614), the
#: backward's output (l. 707) and its received gradient (l. 721)
ENGINE_HOST_SYNCS = 4
#: HBM bytes per checkpointed byte of ``partition_activations`` at recomputation
#: (v0.5.10 ``activation_checkpointing/checkpointing.py`` ``gather_partitioned_activations``,
#: l. 259-290): ``torch.zeros`` of the full tensor (write 1), the list all-gather's copy-out
#: (read 1, write 1), and the forward's partition clone (l. 384, read and write 1/t: ignored)
PARTITION_GATHER_PASSES = 3.0


def cases() -> dict[str, Case]:
    """Every row of ``FILES`` with a job, by id."""
    out: dict[str, Case] = {}
    for f in FILES:
        data = load_reference(os.path.join(ROOT, "strategies", "reference", "data", f))
        for c in data:
            case = case_from_entry(c, data)
            if case.job is not None:
                out[case.id] = case
    return out


def slots(job: Job) -> int:
    """A pipeline's slots, ``m + p − 1``."""
    return job.num_microbatches + job.plan.pp - 1


def per_microbatch_engine_s(job: Job) -> float:
    """Seconds per micro-batch of the engine's partition copies and host synchronisations on
    a middle rank: ``4 · 2 · B_part / copy_rate + 4 · launch_gap`` where ``B_part`` is one
    partition of a stage boundary's activation (``StageCosts.p2p_bytes``); 0 without
    pipelining or tensor parallelism (no ``PartitionedTensor``)."""
    p = job.plan
    if p.pp < 2 or p.tp < 2:
        return 0.0
    sc = stage_costs(job)
    part = float(sc.p2p_bytes)
    return (ENGINE_PARTITION_COPIES * 2.0 * part / float(sc.copy_rate)
            + ENGINE_HOST_SYNCS * float(job.framework.launch_gap_s))


def partition_activations_s(job: Job) -> float:
    """Seconds per step that ``partition_activations`` would add on a stage of
    ``L / p`` layers: per layer and micro-batch, the all-gather of the layer's checkpointed
    input (``b · s · h`` 16-bit values) over the tp group and ``PARTITION_GATHER_PASSES``
    passes of it; 0 at tp 1 (nothing to partition)."""
    p, m = job.plan, job.model
    if p.tp < 2 or p.recompute != "full":
        return 0.0
    sc = stage_costs(job)
    full = 2.0 * p.mbs * m.seq_length * m.hidden_size
    ag = float(cm.collective_time("allgather", full, p.tp, 1, job.cluster))
    per_layer = ag + PARTITION_GATHER_PASSES * full / float(sc.copy_rate)
    return per_layer * (m.num_layers / p.pp) * job.num_microbatches


def pairs_table(cs: dict[str, Case]) -> None:
    for ds, ctl in PAIRS:
        a, b = cs[ctl], cs[ds]
        ea, eb = estimate(a.job), estimate(b.job)
        print(f"\n| term (s) | {ctl} | {ds} |")
        print("|---|---:|---:|")
        for t in TERMS:
            print(f"| {t} | {ea.breakdown_s[t]:.3f} | {eb.breakdown_s[t]:.3f} |")
        print(f"| step, estimated | {ea.step_time_s:.3f} | {eb.step_time_s:.3f} |")
        print(f"| step, measured | {a.measured_step_s:.3f} | {b.measured_step_s:.3f} |")
        print(f"| slots m + p − 1 | {slots(a.job)} | {slots(b.job)} |")
        sa_e, sb_e = ea.step_time_s / slots(a.job), eb.step_time_s / slots(b.job)
        sa_m, sb_m = a.measured_step_s / slots(a.job), b.measured_step_s / slots(b.job)
        print(f"| per slot, estimated ms | {sa_e * 1e3:.1f} | {sb_e * 1e3:.1f} |")
        print(f"| per slot, measured ms | {sa_m * 1e3:.1f} | {sb_m * 1e3:.1f} |")
        print(f"| measured / estimated | {sa_m / sa_e:.3f} | {sb_m / sb_e:.3f} |")


def engine_table(cs: dict[str, Case]) -> None:
    print("\n| row | m | engine ms / micro-batch | engine s / step | miss s | engine / miss "
          "| syncs / step | at 1 ms each / miss | partition_activations s (what-if) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cid, c in cs.items():
        job = c.job
        if job.framework.name != "megatron-deepspeed" or job.plan.pp < 2:
            continue
        e = estimate(job)
        per = per_microbatch_engine_s(job)
        step = per * job.num_microbatches
        miss = c.measured_step_s - e.step_time_s
        syncs = ENGINE_HOST_SYNCS * job.num_microbatches
        print(f"| {cid} | {job.num_microbatches} | {per * 1e3:.3f} | {step:.3f} | "
              f"{miss:+.2f} | {100 * step / miss:.2f} % | {syncs} | {100 * syncs * 1e-3 / miss:.1f} % | "
              f"{partition_activations_s(job):.3f} |")


def mbs_table(cs: dict[str, Case]) -> None:
    print("\n| row | measured s | mbs 1 | mbs 2 | mbs 4 |")
    print("|---|---:|---:|---:|---:|")
    for cid in ("mtnlg_530b_2240gpu", "mtnlg_530b_2800gpu", "mtnlg_530b_3360gpu",
                "glm_130b_768gpu"):
        c = cs[cid]
        cells = []
        for mbs in (1, 2, 4):
            job = dataclasses.replace(c.job, plan=dataclasses.replace(c.job.plan, mbs=mbs))
            t = estimate(job).step_time_s
            cells.append(f"{t:.2f} ({100 * (t / c.measured_step_s - 1):+.1f} %)")
        print(f"| {cid} | {c.measured_step_s:.2f} | " + " | ".join(cells) + " |")


def main() -> int:
    cs = cases()
    pairs_table(cs)
    engine_table(cs)
    mbs_table(cs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

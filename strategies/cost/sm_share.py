"""SMs the overlapped communication kernels hold while the compute runs beside them
(docs/calibration.md §5.152). Vectorised.

A collective that runs on SMs launches its own thread blocks, which stay resident on their
SMs for the whole call: NCCL one CTA per channel, DeepEP/HybridEP their stated SM count,
Transformer Engine's userbuffers the ``num_sm`` of each overlapped GEMM (whose GEMM it
launches on the rest: ``set_sm_margin``). A GEMM whose CTAs need a whole SM's shared memory
(Hopper's warp-specialised kernels, ~227 KiB) cannot share an SM with such a CTA, and a
NCCL CTA shares its SM with no compute kernel on any chip (NCCL's maintainer, NVIDIA/nccl
issue #689: it takes the SM's registers), so while the collective runs the compute has
``sm_count − k`` SMs. A persistent GEMM kernel (Hopper,
Blackwell: one CTA per SM looping over tiles, no wave quantisation in ``gemm_kernel``) then
takes ``sm/(sm − k)`` times as long; the same figure is the many-wave limit of the wave
count on ``sm − k`` slots of a one-CTA-per-tile kernel. A copy-engine transfer
(``cudaMemcpyAsync``: PyTorch's async TP over symmetric memory, Transformer Engine's
``ring_exchange`` with ``use_ce``) holds no SM.

The charge is per overlap window (``overlap_extra``): a window's compute runs at
``(sm − k)/sm`` of its rate only while a collective holding ``k`` SMs is in flight beside it,
so it takes ``min(C·k/sm, W·k/(sm − k))`` longer for a collective of ``C`` seconds beside
``W`` seconds of compute. The estimate adds that, beyond what the window already exposes, in
the one place each window's exposure is formed (the data-parallel stream's
``terms.dp_exposure.lanes_exposed``: ZeRO-0/1/2's reductions; the interleaved schedule's
per-chunk reductions beside the cool-down, ``grad_window_exposed``; the distributed
optimizer's overlapped parameter gathers beside the next forward, ``terms.grad_reduce``;
ZeRO-3's gathers and reduce-scatters a window per pass, ``terms.zero3.pass_sm_extra``; the
userbuffers' reduce-scatters beside the row-parallel forward GEMMs and the expert
all-to-all of an overlapped pair, ``terms.layer_comm``; the context-parallel ring beside the
attention core, ``cp_ring.layer_sm_extra``), at the SMs ``window_sms`` gives each window.
``SystemConfig.comm_sm_share`` switches the charge: 0 by default (off: docs/calibration.md
§5.156, §5.159 and §5.161 give the figures); the lower bound does not charge it; the simulator
charges the same SMs (``window_sms``) to the compute beside each collective in flight
(``simulator.engine.sm_hold``)"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from strategies.cost.token_counts import Num
from strategies.errors import SpecError


#: SMs one NCCL collective holds (one CTA per channel), by GPU generation
#: (``gemm_kernel.GEMM_GENERATION``): NCCL's own default channel count for its NVLink
#: SHARP algorithm, the count its source says reaches peak bandwidth (NVIDIA/nccl master
#: 5067397c, ``src/transport/nvls.cc`` 155-157: ``NVLS_NCHANNELS_SM90 16``,
#: ``NVLS_NCHANNELS_SM100 32`` across nodes, ``_SM100_NVL 24`` within; ``src/enqueue.cc``
#: 2084: "NVLS should not need more than 16 channels to get peak BW"). Ring and tree may
#: use up to ``MAXCHANNELS/2`` = 32 (``src/init.cc`` 1177) and fewer for small messages
#: (``src/enqueue.cc`` 2091-2095), so this is NCCL's figure for a large bucket on one chip.
NCCL_SMS = {"sm_90": 16, "sm_100": 32}
#: SMs of a NCCL collective on a generation without a read figure (Volta, Ampere, AMD):
#: the Hopper figure
NCCL_SMS_DEFAULT = 16
#: SMs a DeepEP dispatch or combine holds: ``Buffer.num_sms = 20`` (deepseek-ai/DeepEP
#: dd758ca ``deep_ep/buffers/legacy.py`` 31; Megatron-Core ``transformer_config.py``
#: ``moe_deepep_num_sms``: "historical default 20")
DEEPEP_SMS = 20
#: SMs a HybridEP dispatch or combine holds: 32, what Megatron-Bridge's performance recipes
#: set whenever the flex dispatcher runs HybridEP (NVIDIA-NeMo/Megatron-Bridge 067f987
#: ``src/megatron/bridge/perf_recipes/_common.py`` 88-89, ``scripts/performance/utils/
#: overrides.py`` 87-89, whose comment says the figure is for a HybridEP *not* overlapped
#: with compute; the skill ``nemo-mbridge-perf-moe-dispatcher-selection`` names 16 as
#: the default)
HYBRIDEP_SMS = 32
#: SMs Transformer Engine's userbuffers take from each GEMM overlapped by its ``pipeline``
#: or ``bulk`` method (TransformerEngine d0067d0 ``pytorch/module/base.py`` 384-386:
#: ``num_sm`` 16 with ``set_sm_margin``; ``ring_exchange`` copies on the copy engine,
#: ``use_ce``, and sets no margin). The default methods (base.py 350-359): ``pipeline`` for
#: the row-parallel forward GEMMs (proj_fprop, fc2_fprop), ``bulk`` for the column-parallel
#: data and weight gradients (qkv/fc1 dgrad, wgrad), ``ring_exchange`` for the rest.
TE_UB_SMS = 16
#: the SM share of a collective on a copy engine (async TP's ``cudaMemcpyAsync``)
COPY_ENGINE_SMS = 0
#: ``plan.DISPATCHERS`` codes: alltoall (NCCL), deepep, hybridep
DISPATCHER_SMS = (None, DEEPEP_SMS, HYBRIDEP_SMS)


def held_sms(sm_count: int, k: Num) -> np.ndarray:
    """``k`` as a float array, checked: a clear error where ``sm_count`` is not a positive
    SM count or ``k`` leaves the GEMM no SM."""
    k = np.asarray(k, dtype=float)
    if not sm_count or sm_count < 1:
        raise SpecError("sm_count", sm_count, "must be a positive SM count")
    if np.any(k >= sm_count) or np.any(k < 0):
        raise SpecError("comm SMs", float(np.max(k)),
                        f"must be in [0, sm_count={sm_count}) to leave the GEMM an SM")
    return k


def sm_factor(sm_count: int, k: Num, share: Num = 1.0) -> Num:
    """Factor (>= 1) on a compute-bound kernel's time when ``k`` of the chip's ``sm_count``
    SMs are held by a communication kernel for ``share`` of its time: ``1 + share ·
    (sm/(sm − k) − 1)`` (a persistent kernel's tiles over ``sm − k`` SMs). A clear error
    where ``k`` leaves no SM."""
    k = held_sms(sm_count, k)
    return 1.0 + np.asarray(share, dtype=float) * (sm_count / (sm_count - k) - 1.0)


def wave_occupancy_on(tiles: Num, sm_count: int, k: Num) -> Num:
    """Busy share of the ``sm_count − k`` SMs left to a one-CTA-per-tile GEMM of ``tiles``
    output tiles: ``tiles / (ceil(tiles/(sm − k)) · (sm − k))`` (the guide's wave count,
    ``gemm_kernel._occupancy``, on the SMs the collective leaves). Its time over the time on
    all SMs is ``ceil(tiles/(sm − k)) / ceil(tiles/sm)``, which ``sm_factor`` takes in the
    many-wave limit."""
    free = sm_count - np.asarray(k, dtype=float)
    t = np.asarray(tiles, dtype=float)
    return t / (np.ceil(t / free) * free)


def nccl_sms(generation: str | None) -> int:
    """SMs one NCCL collective holds on a chip of ``generation`` (``NCCL_SMS``)."""
    return NCCL_SMS.get(generation, NCCL_SMS_DEFAULT) if generation else NCCL_SMS_DEFAULT


def ub_share(gemms: list[tuple]) -> float:
    """Share of a layer's forward-and-backward GEMM FLOPs that Transformer Engine's
    userbuffers launch on ``sm_count − TE_UB_SMS`` SMs: the row-parallel forward GEMMs
    (proj_fprop, fc2_fprop: the ``pipeline`` method with ``set_sm_margin``), of ``gemms``
    (``gemm_shapes.layer_gemm_parts``' ``(part, (count, M, N, K, row))``; the TP-split parts
    ``attn``, ``dense_mlp``, ``shared_mlp``) over every GEMM's three passes (forward, data
    and weight gradient). The ``bulk`` overlaps of the backward set no margin in NeMo's
    configurations (``BulkOverlapCfg(..., set_sm_margin=False)``) and are not charged. 0
    without GEMMs."""
    row = total = 0.0
    for part, (c, M, N, K, r) in gemms:
        f = float(np.mean(2.0 * c * np.asarray(M, dtype=float) * N * K))
        total += 3.0 * f
        if part in ("attn", "dense_mlp", "shared_mlp") and r:
            row += f
    return row / total if total > 0 else 0.0


def overlap_extra(t_comm: Num, t_compute: Num, sm_count: int, k: Num, busy: Num = 1.0,
                  waited: Num | None = None) -> Num:
    """Seconds a window's compute (``t_compute`` seconds on every SM) takes beyond its
    exposed communication while a collective of ``t_comm`` seconds holding ``k`` of the
    chip's ``sm_count`` SMs runs beside it. The compute proceeds at ``(sm − k)/sm`` of its
    rate while the collective is in flight, so it ends at ``W + min(C·k/sm, W·k/(sm − k))``
    (the whole compute slowed when the collective outlasts it: ``W·sm/(sm − k)``); the
    window ends at the later of that and the collective, ``W + max(C − W, e)`` with ``e``
    the compute's extra seconds. Returned: what that adds to the contention-free exposure
    ``max(C − W, 0)``, ``max(e − max(C − W, 0), 0)``; ``e`` is the GEMM work done during the
    collective times ``k/(sm − k)``. ``busy``: the share of the window's ``t_compute``
    seconds that is compute, spread evenly (the rest blocking transfers, which hold no SM
    of the compute's: the interleaved cool-down's pipeline exchanges), so ``e`` is ``busy``
    times the above. ``waited``: the seconds of ``t_comm`` the window's end waits for
    (default all; less where the rest prefetches for a later window, ZeRO-3's backward
    gathers run under the forward), which take the place of ``C`` in ``max(C − W, 0)``.
    0 where ``k`` or either time is 0. Vectorised."""
    k = held_sms(sm_count, k)
    c = np.maximum(np.asarray(t_comm, dtype=float), 0.0)
    w = np.maximum(np.asarray(t_compute, dtype=float), 0.0)
    e = np.minimum(c * k / sm_count, w * k / (sm_count - k))
    if not np.all(np.asarray(busy) == 1.0):
        e = e * np.asarray(busy, dtype=float)
    if waited is not None:
        c = np.maximum(np.asarray(waited, dtype=float), 0.0)
    return np.maximum(e - np.maximum(c - w, 0.0), 0.0)


@dataclass(frozen=True)
class WindowSMs:
    """The SMs each overlap window's collectives hold on one chip (``k`` 0: the rule off or
    the copy engine): ``sm`` the chip's SM count, ``nccl`` a NCCL collective's (the
    data-parallel stream, the context-parallel ring), ``tp`` Transformer Engine's userbuffers
    on the row-parallel forward GEMMs (0 under async TP), ``ub`` those GEMMs' share of a
    layer's forward GEMM seconds (``3·ub_share``), ``ep`` the expert dispatcher's per plan
    (``DISPATCHER_SMS``). Read by the estimate's windows (``overlap_extra``) and the
    simulator's compiled collectives (``simulator.program.builder.held_by_category``)."""

    sm: int
    nccl: float
    tp: float
    ub: float
    ep: Any

    def extra(self, t_comm: Num, t_compute: Num, k: Num, busy: Num = 1.0,
              waited: Num | None = None) -> Num:
        """``overlap_extra`` on this chip (0 where the chip has no SM count)."""
        if not self.sm or not np.any(np.asarray(k) > 0):
            return np.zeros(np.broadcast(np.asarray(t_comm), np.asarray(t_compute)).shape)
        return overlap_extra(t_comm, t_compute, self.sm, k, busy, waited)


#: no SM held by any window (the rule off)
NO_SMS = WindowSMs(sm=0, nccl=0.0, tp=0.0, ub=0.0, ep=0.0)


def window_sms(on: bool, sm_count: int | None, generation: str | None, tp_impl: str,
               dispatcher: Num, ub: float = 0.0) -> WindowSMs:
    """The ``WindowSMs`` of a chip of ``sm_count`` SMs and GEMM ``generation`` under a stack
    whose TP overlap is ``tp_impl`` (``"userbuffers"``: ``TE_UB_SMS``; else the copy engine)
    and plans' expert ``dispatcher`` codes (``plan.DISPATCHERS``), ``ub`` the model's
    ``ub_share``; ``NO_SMS`` where ``on`` is
    false (``SystemConfig.comm_sm_share`` 0) or the chip has no SM count."""
    if not on or not sm_count:
        return NO_SMS
    n = nccl_sms(generation)
    k_ep = np.choose(np.asarray(dispatcher, dtype=int),
                     [n if k is None else k for k in DISPATCHER_SMS])
    return WindowSMs(sm=int(sm_count), nccl=float(n),
                     tp=float(TE_UB_SMS if tp_impl == "userbuffers" else COPY_ENGINE_SMS),
                     ub=3.0 * ub, ep=k_ep)

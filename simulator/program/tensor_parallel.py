"""``TensorParallelOps``: the tensor-parallel collectives that close a layer block of
``simulator.program.builder.ProgramBuilder`` (a mixin: the builder holds the state): TP
all-reduces or SP reduce-scatter + all-gather pairs at their widths (MLA's latents,
``cost.stage.attn_tp_swap``), the overlapped share with ``tp_comm_overlap``, MLA's recomputed
gathers, SP re-gathers and the asynchronous data-gradient reductions carved out of the
backward. Units: seconds, bytes.
"""
from __future__ import annotations

from strategies.cost.comm import collective_time
from strategies.cost.stage import (attn_full_rc_ops, attn_tp_swap, dgrad_reduce_pieces,
                                  dgrad_reduce_time, down_reduce_pieces, sp_regather_pieces,
                                  tp_kind_bytes)

_TP_KINDS = {False: ("allreduce",), True: ("reduce_scatter", "allgather")}   # by sp
TP_TAG = {"allreduce": "AR", "reduce_scatter": "RS", "allgather": "AG"}


class TensorParallelOps:
    """``ProgramBuilder``'s tensor-parallel collectives (reads the builder's state)."""

    def _tp_ops(self, n: float, attn: float, fwd: bool) -> list[tuple[str, float, float]]:
        """``(kind, bytes, repeat)`` of ``n`` tensor-parallel collectives (or SP pairs), of
        which ``attn`` are the attention's: where its column side runs at other widths
        (``cost.stage.attn_tp_swap``: MLA's latents; the backward only where its reduction
        is blocking, ``rd_bytes`` 0) each of those is compiled at its own width, and under
        SP its pair's partner carries the rest of ``2·tp_bytes`` (ring all-gather and
        reduce-scatter times are one affine function of bytes), so a contention-free network
        gives the estimate's ``attn_tp_saved`` less (§5.81)."""
        cs, sp = self.c, bool(self.p.sp)
        kinds = _TP_KINDS[sp]
        swap = attn_tp_swap(cs, sp, fwd) if attn > 0 and (fwd or cs.rd_bytes <= 0) else None
        if swap is None:
            return [(kd, cs.tp_bytes, n) for kd in kinds]
        kind, widths = swap
        nb = tp_kind_bytes(cs, kind)
        ops = []
        for kd in kinds:
            if kd == kind:
                ops += [(kd, cs.tp_bytes, n - attn)] + [(kd, w * nb, attn) for w in widths]
            elif 2 * cs.tp_bytes - nb == cs.tp_bytes:
                ops.append((kd, cs.tp_bytes, n))
            else:
                ops += [(kd, cs.tp_bytes, n - attn), (kd, 2 * cs.tp_bytes - nb, attn)]
        return ops

    def tp_comm(self, n: float, label: str, i: int, c: int, start: tuple, main: int,
                exposed: float = 0.0, after: int | None = None, less: float = 0.0,
                attn: float = 0.0, fwd: bool = True) -> None:
        """``n`` tensor-parallel collectives closing a block (blocking unless overlapped;
        with overlap, the share ``exposed`` of them blocking whole: a backward's
        ``StageCosts.tp_overlap_bwd_exposed``). The blocking ones start after ``main`` and
        ``after`` (the block's expert all-to-all: ``_close_block``). ``less``: reductions of
        them that ran beside the weight gradients (``reduce_split``), not compiled here.
        ``attn``: how many of them are the attention's, in a forward (``fwd``) or backward
        pass (``_tp_ops``)."""
        if n <= 0 or self.c.tp_bytes <= 0:
            return
        tag = TP_TAG
        last = None
        share = attn / n
        if self.p.tp_comm_overlap:
            k = self.c.tp_overlap_chunks
            whole = n * exposed
            n = n - whole if exposed > 0 else n
            m = n * (1 - 1 / k)
            for kd, nbytes, rep in self._once(("tp_ops", m, m * share, fwd),
                                              lambda: self._tp_ops(m, m * share, fwd)):
                # the forward's reduce-scatters (userbuffers' ``pipeline`` method after
                # proj and fc2) hold their SMs beside the GEMMs; its all-gathers
                # (``ring_exchange``: the copy engine) and the backward's ``bulk`` overlaps
                # (no SM margin) are not charged, as in the estimate (``sm_share.ub_share``)
                self.coll("tp-comm", kd, "tp", nbytes, rep, "tp",
                          f"{tag[kd]} tp {label}", i, c, deps=start,
                          sms=self.held["tp_ub"] if fwd and kd != "allgather" else 0.0)
            n = n / k + whole if exposed > 0 else n / k
        if less > 0:
            # ``less`` of the reductions ran beside the weight gradients (``reduce_split``):
            # under SP the rest are bf16 reduce-scatters of ``rd_bytes`` and the gathers
            # carry the remainder of the pair's bytes (``tp_bytes`` is the pair's mean;
            # ring all-gather and reduce-scatter times are one affine function of bytes)
            rd = self.c.rd_bytes
            ops = ((("reduce_scatter", rd, n - less), ("allgather", 2 * self.c.tp_bytes - rd, n))
                   if self.p.sp else (("allreduce", self.c.tp_bytes, n - less),))
            for kd, nbytes, rep in ops:
                last = self.coll("tp-comm", kd, "tp", nbytes, rep, "tp", f"{tag[kd]} tp {label}",
                                 i, c, deps=(main, after)) or last
            if last is not None:
                self.wait.append(last)
            return
        for kd, nbytes, rep in self._once(("tp_ops", n, n * share, fwd),
                                          lambda: self._tp_ops(n, n * share, fwd)):
            last = self.coll("tp-comm", kd, "tp", nbytes, rep, "tp",
                             f"{tag[kd]} tp {label}", i, c, deps=(main, after)) or last
        if last is not None:
            self.wait.append(last)

    def rc_gathers(self, nl: float, label: str, i: int, c: int, rc: int | None,
                   after: int | None) -> None:
        """The all-gathers MLA's recomputed up projections run again over ``nl`` mean
        layers (``cost.stage.attn_rc_gathers``): one per column linear at its latent's
        width, blocking, after the recomputation (and its all-to-all)."""
        cs = self.c
        for w in (cs.attn_w, cs.attn_w2):
            if w > 0:
                ag = self.coll("tp-comm", "allgather", "tp", w * cs.tp_ag_bytes,
                               nl * cs.tp_attn_rc, "tp", f"AG tp recompute {label}", i, c,
                               deps=(rc, after))
                if ag is not None:
                    self.wait.append(ag)

    def full_rc_ops(self, nl: float, n_tp: float, label: str, i: int, c: int,
                    rc: int | None, after: int | None) -> None:
        """The blocking collectives of MLA's attention forward that full recomputation reruns
        (``cost.stage.attn_full_rc_ops``) over the recomputed layers of ``nl``: the mean
        layer's share (``tp_attn_full_rc``), or under block partial recomputation the layers
        ``chunk_recompute_comm`` counts (its ``n_tp``, two per layer), after the rerun's TP
        collectives."""
        cs = self.c
        layers = n_tp / 2 if cs.recompute_cap > 0 else nl * cs.tp_attn_full_rc
        for kd, nb in attn_full_rc_ops(cs, bool(self.p.sp)):
            if nb > 0:
                op = self.coll("tp-comm", kd, "tp", nb, layers, "tp",
                               f"{TP_TAG[kd]} tp recompute attn {label}", i, c,
                               deps=(rc, after))
                if op is not None:
                    self.wait.append(op)

    def regather(self, nl: float, secs: float, label: str, i: int, c: int,
                 start: tuple) -> float:
        """Sequence parallelism's backward re-gathers of ``nl`` mean layers
        (``cost.stage.sp_regather_pieces``) that outlast the data-gradient GEMM they were
        issued before, ``t_ag`` their contention-free all-gather time (the estimate's): one
        all-gather of all their bytes on the tp-comm stream beside a compute op of those
        GEMMs, carved out of the block's ``secs``; the rest of the block waits for both, so
        they expose ``sum(share·(t_ag - dgrad))`` on a contention-free network
        (``cost.stage.sp_regather_exposed``) and more where the flows slow the gather. The
        re-gathers their GEMM hides are not compiled (no exposure, and their link load is
        left out: every one compiled added 39 % events to GPT-3 175B's folded step for a
        step equal to 3e-15; docs/calibration.md §5.70). Pieces of another width (MLA's up
        projections' latents, §5.76) are compiled as their own all-gather, one per width.
        Returns the seconds carved out."""
        cs = self.c
        counts: dict[float, float] = {}     # re-gathers compiled, by width (§5.76)
        d = 0.0
        for share, width, dgrad in self._once(("regather",), lambda: sp_regather_pieces(cs)):
            t_ag = self._piece_time("ag", width)
            if share > 0 and dgrad < t_ag:
                counts[width] = counts.get(width, 0.0) + nl * share
                d += nl * share * dgrad
        if not counts:
            return 0.0
        deps = start + ((self.last_compute,) if self.last_compute is not None else ())
        ags = [ag for width, n in counts.items()
               if (ag := self.coll("tp-comm", "allgather", "tp", cs.rg_bytes * width, n, "tp",
                                   f"AG tp re-gather {label}", i, c, deps=deps)) is not None]
        if not ags:
            return 0.0
        d = min(d, secs)
        self.compute(d, "backward", label, i, c, force=True)
        self.wait += ags
        return d

    def _piece_time(self, kind: str, width: float) -> float:
        """Contention-free seconds of a re-gather (``kind`` "ag") or data-gradient reduction
        ("rd") of ``width`` times the hidden-width bytes (1: QKV, fc1; MLA's up projections'
        latents, §5.76), as the estimate prices it; worked out once per builder."""
        key = (kind, width)
        t = self._piece_s.get(key)
        if t is None:
            t = float(collective_time("allgather", self.c.rg_bytes * width, self.p.tp, 1,
                                      self.cluster)) if kind == "ag" else \
                float(dgrad_reduce_time(self.c, self.p.tp, bool(self.p.sp), self.cluster, width))
            self._piece_s[key] = t
        return t

    def reduce_split(self, nl: float, secs: float) -> float:
        """The column-parallel data gradients' reductions of ``nl`` mean layers' backward
        (``cost.stage.dgrad_reduce_pieces``), each started before its weight-gradient GEMM
        and waited for after it: those that outlast their GEMM are compiled as one
        reduction on the tp-comm stream beside a compute op of those GEMMs carved out of
        the block's ``secs`` (``_close_block`` places both after the block, before its
        blocking collectives), so they expose ``sum(share·(t_red - wgrad))`` on a
        contention-free network (``cost.stage.dgrad_reduce_hidden``); those their GEMM
        hides are taken out of the blocking collectives and not compiled (no exposure,
        their link load left out, as ``regather``'s). The counted hidden-width collective of
        each piece's group leaves the blocking ones; MLA's attention runs it as its up
        projections' two narrower reductions, each compiled at its own width (§5.76).
        MLA's column-parallel down projections' input-gradient reductions
        (``cost.stage.down_reduce_pieces``) join them at the hidden width, each beside its
        own weight gradient (§5.99). Returns the seconds carved out."""
        counts: dict[float, float] = {}     # reductions compiled, by width (§5.76)
        d = n = hid = 0.0
        for share, pieces in self._once(("reduce",), lambda: dgrad_reduce_pieces(self.c)):
            if share <= 0:
                continue
            run = False
            for width, wgrad in pieces:
                t = self._piece_time("rd", width)
                if wgrad < t:
                    counts[width] = counts.get(width, 0.0) + nl * share
                    d += nl * share * wgrad
                    run = True
            # the counted collective leaves the blocking ones: run as these pieces instead
            if run:
                n += nl * share
            else:
                hid += nl * share
        # MLA's column-parallel down projections' input-gradient reductions, each beside its
        # own weight gradient (``cost.stage.down_reduce_hidden``, §5.99): those that outlast
        # it compiled with the rest; all leave ``attn_down_ops``' blocking ones
        # (``_close_block``)
        if self.c.tp_down > 0:
            t = self._piece_time("rd", 1.0)
            for wgrad in self._once(("down_reduce",), lambda: down_reduce_pieces(self.c)):
                if wgrad < t:
                    counts[1.0] = counts.get(1.0, 0.0) + nl
                    d += nl * wgrad
        d = min(d, secs)
        self._reduce = (d, counts, n + hid)
        return d

"""``BlockMemo``: every micro-batch's layer block of one chunk and pass compiles to ops of the
same shape, so ``simulator.program.builder.ProgramBuilder`` (a mixin: the builder holds the
state) builds a block once (``LayerBlocks._build_block``) and stamps copies of its ops for
the next micro-batches: new ids, label, micro-batch and dependencies, every other field the
same. A block is stamped only where what it reads of the builder's state is what the
recording read up to renaming: the same pass, layers and chunk, the same pattern of pending
dependencies (``wait``, ``last_compute``), and none of the pair state (``hidden``,
``lead_a2a``, ``defer_dw``, a pending reduction); ``ProgramBuilder.stamp_blocks`` False
builds every block (tests/test_block_memo.py compares both).
"""
from __future__ import annotations

from simulator.program.ops import Collective, Compute

_NO_REDUCE = (0.0, {}, 0.0)


def _code(d, base: int, ext: tuple) -> int:
    """A dependency ``d`` as an index into ``(*ext, base, base + 1, ...)``: position ``k`` of
    the pending ids ``ext``, or ``len(ext) + d - base`` for an op of the block (ValueError:
    neither, or None)."""
    if d is None:
        raise ValueError("None")
    return len(ext) + d - base if d >= base else ext.index(d)


class _Stamp:
    """One recorded block: its ops by stream (with their label prefixes and dependency
    codes), what it leaves pending and what it returns."""

    __slots__ = ("items", "ops", "size", "wait", "last", "main")

    def __init__(self, items, ops, size, wait, last, main) -> None:
        self.items, self.ops, self.size = items, ops, size
        self.wait, self.last, self.main = wait, last, main


class BlockMemo:
    """``ProgramBuilder``'s block memo (reads and writes the builder's state)."""

    stamp_blocks = True     # False: every block built (the equivalence tests)

    def block(self, fwd: bool, items: list[tuple], label: str, i: int, c: int) -> int:
        """``_build_block``'s ops, built once per (pass, layers, chunk, pending pattern) and
        stamped for the other micro-batches."""
        ext = (*self.wait, self.last_compute)
        if (not self.stamp_blocks or self.hidden is not None or self.lead_a2a
                or self.defer_dw != 0 or self._reduce != _NO_REDUCE or None in ext
                or self.lead_cut is not None):
            return self._build_block(fwd, items, label, i, c)
        key = (fwd, id(items), c, tuple(map(ext.index, ext)))
        memo = self._stamps
        hit = memo.get(key)
        if hit is not None and hit.items is items:
            return self._stamp(hit, label, i, c, ext)
        if key in memo:         # not stampable (or another list under a reused id)
            return self._build_block(fwd, items, label, i, c)
        base = self.next_id
        sizes = {s: len(ops) for s, ops in self.streams.items()}
        main = self._build_block(fwd, items, label, i, c)
        memo[key] = self._record(items, label, i, c, ext, base, sizes, main)
        return main

    def _record(self, items, label: str, i: int, c: int, ext: tuple, base: int, sizes: dict,
                main) -> _Stamp | None:
        """The block just built from ``base`` as a ``_Stamp``; None where it cannot be
        stamped (state left behind, an op of another kind, micro-batch or label)."""
        if self._reduce != _NO_REDUCE or self.defer_dw != 0 or sizes.keys() != \
                self.streams.keys():
            return None
        n = len(label)
        ops = []
        try:
            for s, before in sizes.items():
                for op in self.streams[s][before:]:
                    if type(op) not in (Compute, Collective) or op.microbatch != i \
                            or op.chunk != c or not op.label.endswith(label):
                        return None
                    ops.append((s, op, op.id - base, op.label[:len(op.label) - n],
                                tuple(_code(d, base, ext) for d in op.deps)))
            wait = tuple(_code(d, base, ext) for d in self.wait)
            last = _code(self.last_compute, base, ext)
            code = _code(main, base, ext)
        except ValueError:      # a dependency neither of the block nor pending
            return None
        return _Stamp(items, ops, self.next_id - base, wait, last, code)

    def _stamp(self, st: _Stamp, label: str, i: int, c: int, ext: tuple):
        """``st``'s ops again for micro-batch ``i``'s ``label``, after the pending ``ext``."""
        base = self.next_id
        ids = (*ext, *range(base, base + st.size))
        streams = self.streams
        for s, op, rel, prefix, codes in st.ops:
            deps = tuple([ids[x] for x in codes])
            if type(op) is Compute:
                new = Compute(base + rel, s, op.seconds, op.kind, prefix + label, i, c, deps)
            else:
                new = Collective(base + rel, s, op.kind, op.group, op.nbytes, op.algorithm,
                                 op.tag, op.category, prefix + label, op.repeat, i, c, deps,
                                 op.remote_scale, op.nvlink_share, op.sms)
            streams[s].append(new)
        self.next_id = base + st.size
        self.wait = [ids[x] for x in st.wait]
        self.last_compute = ids[st.last]
        return ids[st.main]

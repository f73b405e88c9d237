"""``Passes``: the forward, backward, input-gradient (``B``) and weight-gradient (``W``)
passes of one micro-batch and chunk in ``simulator.program.builder.ProgramBuilder`` (a mixin:
the builder holds the state), block by block, with the embedding and LM head at the ends and
the gradient buckets launched as their layers complete (``simulator.program.data_parallel``).
Units: seconds.
"""
from __future__ import annotations

from simulator.program.grad_buckets import bucket_segments
from strategies.cost.bucket_cut import lead_tail
from strategies.cost.stage import chunk_sum


class Passes:
    """``ProgramBuilder``'s passes (reads the builder's state)."""

    def forward(self, i: int, c: int) -> None:
        for _ in self._forward_blocks(i, c):
            pass

    def _forward_blocks(self, i: int, c: int, by_layer: bool = False, lead: bool = False):
        """The forward of micro-batch ``i``, chunk ``c``, yielding after each layer block
        (one layer each with ``by_layer``; ``lead``: once more before the first, after the
        embedding)."""
        label, vs = f"F{i}.c{c}", self.vs(c, i)
        # the stage's first forward: its parameter gathers on the fill path (``FillGathers``)
        # (interleaved: the chunk's, dispatched by the schedule; ``fill_before_forward``)
        fill = self.fill_before_forward(c) if self.fills else None
        if vs == 0:
            if fill is not None:
                self.fill_need(fill.embedding)
            self.compute(self.c.embedding_fwd, "embedding", label, i, c)
        if lead:
            yield
        rest = self._z3(label, i)
        if fill is None:
            for items in self.pieces(c, False, by_layer):
                self.block(True, items, label, i, c)
                yield
        else:
            n = 0
            counts = [1] * len(self.chunk[c]) if by_layer or self.gran == "layer" \
                else fill.counts()
            for nl, items in zip(counts, self.segments(c, counts, False)):
                self.fill_need(*fill.layers[n])
                self.block(True, items, label, i, c)
                n += nl
                yield
        self.wait += rest
        if vs == self.last_vs:
            if fill is not None:
                self.fill_need(fill.head)
            self.compute(self.c.head_fwd, "lm_head", label, i, c)
        self.produced[("F", i, c)] = (self.last_compute, *self.wait)

    def backward(self, i: int, c: int) -> None:
        """The backward of micro-batch ``i``, chunk ``c``: the whole pass, or only its
        input-gradient part ``B`` when the schedule splits it (the gradients are then
        complete, and reduced, after ``wgrad``)."""
        if self.split:
            self._input_grad(i, c)
            return
        for _ in self._backward_blocks(i, c):
            pass

    def _backward_blocks(self, i: int, c: int, by_layer: bool = False, lead: bool = False):
        """The whole backward of micro-batch ``i``, chunk ``c``, yielding after each layer
        block (one layer each with ``by_layer``: Megatron's combined 1F1B pairs it whole;
        ``lead``: once more before the first, after the LM head)."""
        label, vs = f"B{i}.c{c}", self.vs(c, i)
        plan = self.buckets[c]
        final = i == self.final_mb[c]
        live = self.grad_sync and self.ogr_g and (final or self.every_mb)
        # a chunk reduced whole after its backward (``reduces_chunk_after_backward``): no
        # bucket starts inside it, all start with ``_launch`` after its last compute
        live_in = live and not (self.sched.reduces_chunk_after_backward and not self.every_mb)
        todo = list(plan.buckets)
        pos = 0
        if vs == self.last_vs:
            if self.p.ep_overlap:       # the loss needs the forward's output, whose last
                # all-to-all a combined pair leaves to its message (``combined_pair``)
                self.wait += [x for x in self.produced.get(("F", i, c), ()) if x is not None
                              and x not in self.wait]
            self.compute(self.c.head_bwd, "lm_head", label, i, c)
        if lead:
            yield
        if plan.head:
            pos = 1
            todo = self._launch(todo, pos, live_in, final)
        rest = self._z3(label, i, fwd=False)
        z3 = self._z3_layered()
        split = self.gran == "layer" or by_layer or (live_in and len(todo) > 1) or z3
        counts = bucket_segments(plan, len(self.chunk[c]), split,
                                 self.gran == "layer" or by_layer or z3)
        done = 0
        for nl, items in zip(counts, self.segments(c, counts, True)):
            lead = pos + 2 * nl - 1     # after the lead (MLP) of the block's last layer
            if live_in and todo and todo[0][0] < lead:
                self.lead_cut = lambda: self._launch(todo, lead, True, final)
            main = self.block(False, items, label, i, c)
            self.lead_cut = None
            pos += 2 * nl               # each layer: its lead, then its attention
            todo = self._launch(todo, pos, live_in, final)
            done += nl
            if z3:
                self._z3_reduce_layers(nl, done, c, main, label, i)
            yield
        self.wait += rest
        if vs == 0:
            self.compute(self.c.embedding_bwd, "embedding", label, i, c)
        pos += 1 if plan.embedding else 0
        todo = self._launch(todo, pos, live, final)
        self._close_grads(todo, final, label, i, self.p.zero == 3 and self.copies, c)
        self.produced[("B", i, c)] = (self.last_compute, *self.wait)

    def _input_grad(self, i: int, c: int) -> None:
        for _ in self._input_grad_blocks(i, c):
            pass

    def _input_grad_blocks(self, i: int, c: int, by_layer: bool = False):
        """``B`` of a split backward: the input-gradient part of the LM head, the layers
        (with their recomputation and communication) and the embedding (none: its backward
        is all weight gradient); no gradient is complete yet. Yields after each layer
        block (one layer each with ``by_layer``)."""
        label, vs = f"B{i}.c{c}", self.vs(c, i)
        if vs == self.last_vs:
            self.compute(self.c.head_bwd - self.c.head_wgrad, "lm_head", label, i, c)
        rest = self._z3(label, i, fwd=False)
        for items in self.pieces(c, True, by_layer):
            self.block(False, items, label, i, c)
            yield
        self.wait += rest
        if vs == 0:
            self.compute(self.c.embedding_bwd - self.c.embedding_wgrad, "embedding", label, i, c)
        self.produced[("B", i, c)] = (self.last_compute, *self.wait)

    def wgrad(self, i: int, c: int) -> None:
        """``W`` of a split backward: the weight-gradient GEMMs (and their accumulation) of
        the LM head, the layers and the embedding, in backward order, compute only; the
        chunk's gradient buckets are reduced as ``backward`` reduces them, here after each
        bucket's last ``W`` (the last micro-batch's)."""
        label, vs, cs = f"W{i}.c{c}", self.vs(c, i), self.c
        plan = self.buckets[c]
        final = i == self.final_mb[c]
        live = self.grad_sync and self.ogr_g and (final or self.every_mb)
        todo, pos = list(plan.buckets), 0
        if vs == self.last_vs:
            self.compute(cs.head_wgrad, "wgrad", label, i, c)
        if plan.head:
            pos = 1
            todo = self._launch(todo, pos, live, final)
        z3 = self._z3_layered()
        split = self.gran == "layer" or (live and len(todo) > 1) or z3
        counts = bucket_segments(plan, len(self.chunk[c]), split, self.gran == "layer" or z3)
        done = 0
        for nl, items in zip(counts, self.segments(c, counts, True)):
            secs, lead = chunk_sum(items, lambda x: x.layer_wgrad), pos + 2 * nl - 1
            if live and not z3 and todo and todo[0][0] < lead:
                # buckets that close with the last layer's lead (MLP): its attention's
                # weight gradients after them (``LayerBlocks.cut_at_lead``)
                x = items[-1][1]
                secs = self.cut_at_lead(secs,
                                        lead_tail(x.layer_wgrad, 0.0, x.layer_lead_work),
                                        "wgrad", label, i, c,
                                        lambda: self._launch(todo, lead, live, final))
            main = self.compute(secs, "wgrad", label, i, c, force=z3)
            pos += 2 * nl               # each layer: its lead, then its attention
            todo = self._launch(todo, pos, live, final)
            done += nl
            if z3:
                self._z3_reduce_layers(nl, done, c, main, label, i)
        if vs == 0:
            self.compute(cs.embedding_wgrad, "wgrad", label, i, c)
        pos += 1 if plan.embedding else 0
        todo = self._launch(todo, pos, live, final)
        self._close_grads(todo, final, label, i, self.p.zero == 3 and self.copies, c)

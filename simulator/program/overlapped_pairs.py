"""``OverlappedPairs``: overlapped groups of passes in
``simulator.program.builder.ProgramBuilder`` (a mixin: the builder holds the state):
DualPipe's ``F& B& W`` and Megatron-Core's combined 1F1B pairs, run layer by layer on the one
compute stream with each pass's expert all-to-all beside the partner's compute, and
Megatron's combined pair in its own sub-layer order. Units: seconds.
"""
from __future__ import annotations

from strategies.schedules import Step


class OverlappedPairs:
    """``ProgramBuilder``'s overlapped pairs (reads the builder's state)."""

    def overlapped(self, group: list[Step]) -> None:
        """An overlapped group (``Step.overlap``; DualPipe's ``F& B& W``, a forward and a
        whole backward of two micro-batches; Megatron-Core's combined 1F1B ``F& B``, the
        backward unsplit, ``strategies.schedules.combined``): the compute runs in turn on the one compute
        stream (the two share the SMs, so the pair lasts ``F + B + W``), layer by layer, the
        forward's layer then the backward's; each pass's expert all-to-all is waited for only
        by its own next layer, so it runs beside the partner's layer and is exposed only by
        what outlasts it (DeepSeek-V3 §3.2.1). TP and CP collectives still block the compute
        stream. The weight gradients run after both; the pair's point-to-point messages leave
        once the whole pair has run, in one exchange after the group (deepseek-ai/DualPipe
        posts them after ``_forward_backward_compute_chunk`` and waits for them with the next
        step's receives), which is the model of DeepSeek's ``F&B`` bubble. Megatron's
        combined pair with expert all-to-alls runs in its own sub-layer order instead
        (``combined_pair``)."""
        passes = [s for s in group if s.kind != "W"]
        partner = next((s for s in passes if s.kind == "B"), None)
        if partner is not None:
            for s in passes:
                if s.kind == "F":
                    self.paired[f"F{s.microbatch}.c{s.chunk}"] = \
                        f"B{partner.microbatch}.c{partner.chunk}"
        gens = {}
        # Megatron's combined 1F1B with expert all-to-alls: its own sub-layer order
        # (``combined_pair``)
        combined = (partner is not None and not self.split and self._moe and len(passes) == 2
                    and passes[0].kind == "F")
        for s in passes:
            if s.kind == "F":
                gens[s] = self._forward_blocks(s.microbatch, s.chunk, by_layer=True,
                                               lead=combined)
            elif self.split:
                gens[s] = self._input_grad_blocks(s.microbatch, s.chunk, by_layer=True)
            else:       # Megatron's combined 1F1B: the whole backward is the partner
                gens[s] = self._backward_blocks(s.microbatch, s.chunk, by_layer=True,
                                                lead=combined)
        if combined:
            dw = self.combined_pair(passes[0], partner, gens)
            self._pair_outputs(group, [partner])
            # ``delay_wgrad_compute``: the last backward layer's attention weight gradient
            # after the backward's output is posted, beside its transfer (§5.87)
            self.compute(dw, "wgrad", f"W{partner.microbatch}.c{partner.chunk}",
                         partner.microbatch, partner.chunk)
            return
        own: dict[Step, list] = {s: [] for s in passes}
        live = list(passes)
        while live:
            for s in list(live):
                mine, own[s] = own[s], []
                self.wait += mine
                self.hidden = own[s]
                try:
                    next(gens[s])
                except StopIteration:
                    # the pass ended (its output, ``produced``, waits for its last
                    # all-to-all); what no compute of its own took is not the partner's to wait
                    live.remove(s)
                    left = [x for x in mine if x in self.wait]
                    self.wait = [x for x in self.wait if x not in left]
                    key = (s.kind, s.microbatch, s.chunk)
                    self.produced[key] = self.produced[key] + tuple(
                        x for x in left + own[s] if x not in self.produced[key])
                    own[s] += left
                finally:
                    self.hidden = None
        self._pair_outputs(group, passes)

    def _pair_outputs(self, group: list[Step], passes: list[Step]) -> None:
        """The end of an overlapped group: its weight gradients, then its outputs leave."""
        for s in group:
            if s.kind == "W":
                self.wgrad(s.microbatch, s.chunk)
        # (a pass's last all-to-all is waited for by its output message, ``produced``, and
        # queues the next one on the ep-comm stream; no compute of this rank needs it)
        for s in passes:        # the outputs leave once the whole pair has run
            key = (s.kind, s.microbatch, s.chunk)
            self.produced[key] = self.produced[key] + (self.last_compute,)

    def combined_pair(self, f: Step, b: Step, gens: dict) -> float:
        """Megatron-Core's combined 1F1B pair in its own sub-layer order (Megatron-LM
        d98e8a64 ``models/common/model_chunk_schedule_plan.py``: ``TransformerModelChunk
        SchedulePlan.run`` runs the forward's embedding and the backward's LM head first,
        then layer pairs; ``TransformerLayerSchedulePlan.run`` per pair: comm stream
        ``combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd`` beside compute
        ``attention_fwd | mlp_bwd, mlp_fwd | attention_bwd``). With a layer's all-to-alls
        lumped, the backward layer's runs ahead of its compute, beside the forward layer's
        compute, and the forward layer's after its compute, beside the backward layer's:
        each exposed only by what outlasts that compute (``combined.pair_exposed``), and
        no pass ends on an all-to-all of its own. Layers left over when one pass is
        longer run alone, their all-to-alls exposed. The forward's output leaves when the
        forward ends (``post_forward`` runs on the communication stream after the forward's
        last op, "overlapped with the pre_dispatch backward"), the backward's when the pair
        ends (``post_backward`` on the compute stream). With pipelining the backward's last
        layer leaves its attention weight gradient (``dw_attn``, Megatron-Bridge's
        ``delay_wgrad_compute``) to run after that message is posted
        (``b_layer.pre_dispatch_computation.backward_dw()`` after ``post_backward``): the
        seconds returned, which the caller runs once the outputs are recorded (§5.87)."""
        inputs = tuple(self.wait)
        dw = self.c.dw_attn if self.p.pp > 1 and self.p.delay_wgrad else 0.0
        label = f"B{b.microbatch}.c{b.chunk}"
        layers = self.pieces(b.chunk, True, by_layer=True)
        next(gens[f])               # the embedding (first virtual stage)
        mark = self.last_compute
        next(gens[b])               # the LM head's backward (last virtual stage)
        # the backward's first all-to-all waits for all the compute queued before it (the
        # plan's event is recorded on the compute stream after the embedding and the LM
        # head: ``b_schedule_plan.record_current_stream()``), the previous pass's deferred
        # weight gradient included (§5.91)
        b_last = tuple(x for x in (self.last_compute, *inputs) if x is not None) \
            if self.last_compute == mark else (self.last_compute,)
        own: list = []
        live_f = live_b = True
        k, f_last = 0, mark
        while live_f or live_b:
            lead = self.moe_colls(layers[k], label, b.microbatch, b.chunk, b_last) \
                if live_b and k < len(layers) else []
            if live_f:
                mine, own = own, []
                self.wait += mine
                self.hidden = own
                before = self.last_compute
                try:
                    next(gens[f])
                    f_last = self.last_compute
                except StopIteration:
                    # the forward ended: its output (``produced``) waits for its own last
                    # compute (the partner's ran since) and its last all-to-all, which no
                    # compute of the partner waits for
                    live_f = False
                    left = [x for x in mine if x in self.wait]
                    self.wait = [x for x in self.wait if x not in left]
                    key = ("F", f.microbatch, f.chunk)
                    done = self.produced[key]
                    if self.last_compute == before:     # no LM head ran after the layers
                        done = (f_last,) + done[1:]
                    self.produced[key] = done + tuple(x for x in left + own if x not in done)
                finally:
                    self.hidden = None
            if live_b:
                self.wait += lead
                self.lead_a2a = True
                self.defer_dw = dw if k == len(layers) - 1 else 0.0
                try:
                    next(gens[b])
                    b_last = (self.last_compute,)
                except StopIteration:
                    live_b = False
                finally:
                    self.lead_a2a = False
                    self.defer_dw = 0.0
            k += 1
        return dw if layers else 0.0

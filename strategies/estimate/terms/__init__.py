"""The terms of the analytic step (``strategies.estimate.analytic``, whose docstring gives the
model; it composes them): ``layer_comm`` (a layer's exposed TP, CP and EP communication),
``stages`` (each kind of rank's seconds and the pipeline's span), ``messages`` (the pipeline's
point-to-point messages), ``dp_calls`` (each kind of rank's data-parallel collectives),
``dp_exposure`` (the closed forms of the data-parallel stream's exposed seconds), ``buckets``
(the windows the gradient buckets run under, each rank's slack), ``grad_reduce`` (the
reductions and gathers), ``zero2`` and ``zero3`` (ZeRO-2's and ZeRO-3's terms), ``tail``
(the step's tail), ``ranks`` (the kinds of rank) and ``faults`` (degraded links,
stragglers)."""

"""The cost model: ``counts`` (FLOPs, bytes, parameters), ``compute`` (kernel seconds),
``comm`` (contention-free collective seconds) and ``stage`` (the per-stage record that the
analytic estimate, the lower bound and the simulator all read)."""

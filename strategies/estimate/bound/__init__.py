"""The terms of the lower bound on a plan's step time (``strategies.estimate.lower_bound``,
whose docstring says why each is a floor): ``floors`` (the least time of a collective, an
all-to-all or a pipeline send on the simulated network), ``blocking`` (a layer's blocking
communication), ``layer_mix`` (dense and MoE layers), ``gpu_types`` (the stage-cost record on
each GPU type of a mixed cluster), ``chunks`` (a model chunk's seconds), ``stage_layers``
(each kind of rank's layers), ``chains`` (a stage's compute chain), ``data_parallel`` (the
dp stream's terms) and ``pipeline_paths`` (a stage's way in and back, and its bound)."""

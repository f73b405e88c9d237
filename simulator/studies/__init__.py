"""Studies built on simulate and search: ``validate`` (published runs), ``whatif``
(a search per variant) with ``whatif_variants`` (the pure variant model), and
``compare_schedules``."""

"""The plan search without simulation: the pruned plan space (``space``), the
bound-ordered exact top-k (``bound_ordered``) and the recommendation in words
(``recommend``). Running simulations for it is ``simulator.search``.

The space's parts (imports point one way: ``options``, ``plan_rows`` <- ``fix_parse``,
``prune_rules`` <- ``axes`` <- ``product``; ``space_memory``, ``prune_rules`` <- ``fitting``; all <- ``space``):

* ``options``: ``SpaceOptions`` (the knobs), ``SCHEDULE_SETS``;
* ``plan_rows``: the columns (``COLUMNS``), a row as a ``Plan`` (``plan_of``), its key
  (``plan_key``, ``SWITCH_KEYS``), ``columns_from_plans``;
* ``fix_parse``: ``--fix`` (``FIX_KEYS``, ``parse_fix``);
* ``axes``: the factorizations of the GPU count with ``etp``, each dimension's values
  (``search_axes``), the uneven layouts' ``(schedule, vpp)`` pairs, ``solved_per_job``;
* ``product``: the raw space (``raw_product``: the grid, layouts, hybrid twins, both
  ``delay_wgrad``);
* ``prune_rules``: ``RULES`` and their masks (``row_rules``, ``framework_ok``,
  ``schedule_ok``, ``pipeline_bubble``);
* ``space_memory``: the memory rule (``SpaceMemory``: ``peak_memory_arrays`` with the stack's
  terms);
* ``fitting``: rows set in place to the least that works (``least_group``,
  ``fewest_flushes``, ``least_recompute``);
* ``zero2_dominance``: ZeRO-2's ZeRO-1 twins and the ``zero2_dominated`` rule;
* ``space``: ``Space`` and ``enumerate_space``, which applies them in ``RULES`` order."""
from strategies.search.bound_ordered import SearchOutcome, bound_ordered_search
from strategies.search.space import Space, SpaceOptions, enumerate_space

__all__ = ["SearchOutcome", "Space", "SpaceOptions", "bound_ordered_search", "enumerate_space"]

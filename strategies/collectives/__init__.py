"""Collective algorithms: one module per algorithm, each giving, from one definition, the
phases of flows the simulator's engine runs (``phases``, a pure description) and the
contention-free time the analytic estimate and the lower bound use (``time``); ``select``
holds the one rule that picks an algorithm for a group. See docs/architecture.md
("Collectives").

Public API: ``Phase``, ``steps``, ``seconds_alone``, ``PASSES``, ``KINDS``, ``ALGORITHMS``,
``register``, ``phases_of``, ``algorithm_for``, ``strided_algorithm``, the names ``RING``,
``HIERARCHICAL``, ``ALL_TO_ALL``, ``MIXED``, and the modules ``ring``, ``hierarchical``,
``all_to_all``, ``select``.
"""
from strategies.collectives import all_to_all, hierarchical, ring, select
from strategies.collectives.phase import KINDS, PASSES, Phase, seconds_alone, steps
from strategies.collectives.select import (ALGORITHMS, ALL_TO_ALL, HIERARCHICAL, MIXED, RING,
                                           algorithm_for, phases_of, register,
                                           strided_algorithm)

__all__ = ["ALGORITHMS", "ALL_TO_ALL", "HIERARCHICAL", "KINDS", "MIXED", "PASSES", "Phase",
           "RING", "algorithm_for", "all_to_all", "hierarchical", "phases_of", "register",
           "ring", "seconds_alone", "select", "steps", "strided_algorithm"]

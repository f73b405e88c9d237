"""Pipeline schedules: one module per schedule, each a registered ``Schedule`` that owns its
order, placement, exchanges, memory, closed forms, validity rules, search space and exports
(``strategies.schedules.base``; docs/architecture.md, "Schedules: the plug-in interface"),
whose default methods come one concern a mixin: ``placement``, ``order_figures``,
``closed_forms`` and ``validity`` (``Rule`` lists and the checks that read them). Around the
interface (imports point one way: ``step`` <- ``stash``, ``per_distinct`` <- ``placement``,
``order_figures``; those, ``closed_forms`` and ``validity`` <- ``base`` <- ``registry``):
``step`` (the ``Step`` record, what orders are built with), ``stash`` (what an order
stashes), ``per_distinct`` (figures over arrays) and ``registry`` (registration, look-ups by
name and code).

>>> schedule_names()[:5]
['1f1b', 'deepspeed-1f1b', 'dualpipe', 'dualpipev', 'gpipe']
>>> schedule_names()[5:]
['interleaved', 'zb-1p', 'zb-2p', 'zb-h1', 'zb-h2', 'zb-v']
"""
# registration order fixes the codes of plan arrays: gpipe 0, 1f1b 1, interleaved 2, zb-h1 3,
# deepspeed-1f1b 4, zb-h2 5, zb-v 6, dualpipev 7, dualpipe 8, zb-1p 9, zb-2p 10
from strategies.schedules import gpipe, one_f_one_b, interleaved, zb_h1  # noqa: F401
from strategies.schedules import deepspeed_1f1b  # noqa: F401
from strategies.schedules import zb_h2, zb_v, dualpipev, dualpipe  # noqa: F401
from strategies.schedules import zb_auto  # noqa: F401
from strategies.schedules.base import Schedule
from strategies.schedules.registry import (DEFAULT_SCHEDULE, attr_by_code, head_rank, dispatch,
                                           get_schedule, register, resolve_name, schedule_code,
                                           schedule_names, schedule_of_code, schedules, unregister)
from strategies.schedules.step import Step

__all__ = ["DEFAULT_SCHEDULE", "Schedule", "Step", "attr_by_code", "dispatch", "get_schedule",
           "head_rank", "register", "resolve_name", "schedule_code", "schedule_names", "schedule_of_code",
           "schedules", "unregister"]

"""Pipeline schedules as pure functions, looked up by name.

>>> schedule_names()
['1f1b', 'gpipe', 'interleaved']
"""
from strategies.schedules import gpipe, interleaved, one_f_one_b  # noqa: F401  (register)
from strategies.schedules.base import Step, get_schedule, register, schedule_names

__all__ = ["Step", "get_schedule", "register", "schedule_names"]

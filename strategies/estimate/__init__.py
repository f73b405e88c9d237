"""The analytic estimate of a step (``analytic``: vectorised over plans, its terms in
``terms``; ``scalar``: one job, the ``Estimate`` record) and the lower bound that makes the
search exact (``lower_bound``, its terms in ``bound``)."""
from strategies.estimate.scalar import BREAKDOWN_KEYS, Estimate, estimate

__all__ = ["BREAKDOWN_KEYS", "Estimate", "estimate"]

"""The plan search without simulation: the pruned plan space (``space``), the
bound-ordered exact top-k (``bound_ordered``) and the recommendation in words
(``recommend``). Running simulations for it is ``simulator.search``."""
from strategies.search.bound_ordered import SearchOutcome, bound_ordered_search
from strategies.search.space import Space, SpaceOptions, enumerate_space

__all__ = ["SearchOutcome", "Space", "SpaceOptions", "bound_ordered_search", "enumerate_space"]

"""Published training runs as cases to validate against: ``cases`` (entry -> ``Case``, read
through ``entry_specs``, ``entry_stack``, ``plan_reading``, ``stated_switches`` and
``recipe_options``), ``text`` (free-text readers: GPU, links, family, framework) and
``measured`` (the step time a source implies). The shipped file is ``data/published.json``."""
from strategies.reference.cases import DATA, Case, case_from_entry, load_reference

__all__ = ["DATA", "Case", "case_from_entry", "load_reference"]

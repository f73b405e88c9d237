"""The registry of named software-stack profiles (``--framework``): ``PROFILES``, ``ALIASES``,
``DEFAULT`` (Megatron-Core) and ``get_profile``. The profiles, their fields and the stacks'
rules live in ``strategies.stacks`` (its package docstring maps the modules)."""
from __future__ import annotations

from strategies.errors import SpecError
from strategies.stacks.deepspeed import MEGATRON_DEEPSPEED
from strategies.stacks.jax_xla import JAX_XLA
from strategies.stacks.megatron import HAI_LLM, MEGATRON_CORE, MEGATRON_LM_2021, NEMO
from strategies.stacks.profile import FrameworkProfile
from strategies.stacks.pytorch import AUTOMODEL, PYTORCH_EAGER, TORCHTITAN
from strategies.stacks.variants import COMPILE_SUFFIX, TORCHTITAN_COMPILE, compiled

PROFILES: dict[str, FrameworkProfile] = {
    p.name: p for p in (MEGATRON_CORE, NEMO, MEGATRON_LM_2021, MEGATRON_DEEPSPEED, TORCHTITAN,
                        PYTORCH_EAGER, JAX_XLA, HAI_LLM, AUTOMODEL)}
ALIASES: dict[str, str] = {"megatron": "megatron-core", "megatron-bridge": "nemo",
                           "megatron-lm": "megatron-lm-2021", "deepspeed": "megatron-deepspeed",
                           "composer": "pytorch-eager", "maxtext": "jax-xla", "fsdp": "pytorch-eager",
                           "deepseek": "hai-llm", "nemo-automodel": "automodel"}
DEFAULT = MEGATRON_CORE


def get_profile(name: str | FrameworkProfile | None) -> FrameworkProfile:
    """A profile by name (``None``: the default, Megatron-Core)."""
    if name is None:
        return DEFAULT
    if isinstance(name, FrameworkProfile):
        return name
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key == TORCHTITAN_COMPILE.name:      # a variant of a stack, not a stack of its own
        return TORCHTITAN_COMPILE
    if key not in PROFILES and key.endswith(COMPILE_SUFFIX):
        base = key[:-len(COMPILE_SUFFIX)]
        base = ALIASES.get(base, base)
        if base in PROFILES:
            return compiled(PROFILES[base])
    if key not in PROFILES:
        raise SpecError("framework", name, f"unknown framework; known: {', '.join(PROFILES)}, "
                        f"{TORCHTITAN_COMPILE.name} (aliases: {', '.join(ALIASES)})")
    return PROFILES[key]

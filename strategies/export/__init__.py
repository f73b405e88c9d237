"""Launch settings of a plan for the stacks paraplan exports to, one module per stack.

``strategies.launch`` holds the registry (``EXPORTS``) and the dispatch (``export``); the
Megatron-LM arguments live there too. Here: ``deepspeed`` (the DeepSpeed config and the
Megatron-DeepSpeed launch line), ``torchtitan`` (its TOML job config), ``maxtext`` (MaxText's
YAML overrides), ``llm_foundry`` (llm-foundry's train YAML keys) and ``toml`` (a small TOML
writer).
"""

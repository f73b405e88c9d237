"""One Megatron-Bridge performance config as the reference rows read it (``MoeRecipe``): the
row it fits (container, model, GPU, GPU count, precision, parallel layout) and the MoE options
it runs; the NeMo containers a config may fit and how a table names one (``table_container``);
the CUDA-graph implementations and scopes Megatron-Core takes. The configs themselves:
``strategies.reference.bridge_recipes``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from strategies.cost.recompute import MODULES as RECOMPUTE_MODULES
from strategies.errors import SpecError
from strategies.layout import parse_layout
from strategies.plan import DISPATCHERS


@dataclass(frozen=True)
class MoeRecipe:
    """One config: the row it fits and the MoE options it runs.

    ``layout``: ``(tp, pp, vpp, ep, mbs, gbs)`` (vpp 1 without interleaving);
    ``dispatcher``: ``"alltoall"``, ``"deepep"`` or ``"hybridep"`` (``plan.DISPATCHERS``);
    ``etp``: the config's expert tensor-parallel size (None: Megatron's default, = tp);
    ``recompute_modules``: the modules the config recomputes selectively
    (``recompute_modules``; None: not read from the config, the stack's default)."""

    model: str
    gpu: str
    n_gpus: int
    precision: str
    layout: tuple[int, int, int, int, int, int]
    ep_overlap: bool
    dispatcher: str
    source: str
    etp: int | None = None
    recompute_modules: tuple[str, ...] | None = None
    cuda_graph_impl: str | None = None
    cuda_graph_scope: tuple[str, ...] | None = None
    lines: str = ""
    pp_layout: str | None = None
    tp_comm_overlap: bool | None = None
    container: str = "26.04.01"

    def __post_init__(self) -> None:
        if self.container not in CONTAINERS:
            raise SpecError("container", self.container,
                            f"must be one of {', '.join(CONTAINERS)} ({self.source})")
        if self.dispatcher not in DISPATCHERS:
            raise SpecError("moe_flex_dispatcher_backend", self.dispatcher,
                            f"must be one of {', '.join(DISPATCHERS)} ({self.source})")
        for m in self.recompute_modules or ():
            if m not in RECOMPUTE_MODULES:
                raise SpecError("recompute_modules", m, "unknown module; valid: "
                                f"{', '.join(RECOMPUTE_MODULES)} ({self.source})")
        if self.cuda_graph_impl not in CUDA_GRAPH_IMPLS:
            raise SpecError("cuda_graph_impl", self.cuda_graph_impl, "must be one of "
                            f"{', '.join(map(str, CUDA_GRAPH_IMPLS))} ({self.source})")
        for sc in self.cuda_graph_scope or ():
            if sc not in CUDA_GRAPH_SCOPES:
                raise SpecError("cuda_graph_scope", sc, "must be one of "
                                f"{', '.join(CUDA_GRAPH_SCOPES)} ({self.source})")
        if self.pp_layout is not None:
            chunks = self.layout[1] * self.layout[2]
            if len(parse_layout(self.pp_layout, "pp_layout")) != chunks:
                raise SpecError("pp_layout", self.pp_layout, f"must name pp*vpp = {chunks} "
                                f"chunks, one per '|'-separated stage ({self.source})")

    @property
    def current_scaling(self) -> bool:
        """Whether the config is one of the harness's FP8 current-scaling configs (``*_FP8_CS_*``,
        the only non-block FP8 recipe it runs, ``perf_harness.FP8_CS_SOURCE``): a row whose
        precision says plain ``fp8`` then ran current scaling, not delayed scaling."""
        return "_FP8_CS_" in self.source

    @property
    def full_iteration_graph(self) -> bool:
        """Whether the config captures the whole training step in one CUDA graph (what the
        plan's ``cuda_graph`` switch means): Megatron-Core's ``full_iteration`` scope under
        its own (``local``) implementation. Transformer Engine's per-layer scopes (``attn``,
        ``mlp``, ``moe_router``, ``moe_preprocess``, ...) capture parts of each layer and
        leave the step's other launches and synchronisations: not a full-iteration graph."""
        return self.cuda_graph_impl == "local" and "full_iteration" in (self.cuda_graph_scope
                                                                        or ())


#: the NeMo containers whose published rows a config may fit, as the rows' ``source.table``
#: names them (``table_container``): 26.04.01 from Megatron-Bridge v0.4.2, 26.04 from v0.4.0,
#: 25.11 from v0.2.0. 26.04 and 26.04.01 are two releases with their own tables and configs
#: (Qwen3-235B-A22B on B300 ran Megatron's alltoall dispatcher in 26.04, HybridEP in 26.04.01)
CONTAINERS = ("26.04.01", "26.04", "25.11")
_CONTAINER = re.compile(r"\((\d\d\.\d\d(?:\.\d\d)?) NeMo container\)")


def table_container(table: str) -> str | None:
    """The NeMo container a Megatron-Bridge table names, ``"(26.04.01 NeMo container)"`` ->
    ``"26.04.01"``; None where it names none. Exact: a 26.04 table is not a 26.04.01 one."""
    found = _CONTAINER.search(table or "")
    return found.group(1) if found else None


#: ``cuda_graph_impl`` values Megatron-Core takes (``TransformerConfig.cuda_graph_impl``;
#: None: the config leaves the recipe's default)
CUDA_GRAPH_IMPLS = (None, "none", "local", "transformer_engine")
#: ``cuda_graph_scope`` values Megatron-Core takes (``CudaGraphScope``)
CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess",
                     "mamba")

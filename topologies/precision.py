"""Training precisions (``--dtype``): which tensor-core rate their GEMMs run at, what their
GEMM operands weigh and what their quantisation casts cost.

One row per name a public run uses. Units: bytes per element.

- ``bf16``, ``fp16``: 16-bit rate, 2-byte operands, no casts.
- ``fp8`` (= ``fp8-delayed``): per-tensor scaling from the amax *history* (Transformer
  Engine ``DelayedScaling``); fp8 rate, 1-byte operands; the cast reads 2 B, writes 1 B.
- ``fp8-current``: per-tensor scaling from the *current* amax (TE ``Float8CurrentScaling``,
  Megatron ``--fp8-recipe tensorwise``): as ``fp8`` plus one read pass (2 B) for the amax.
- ``mxfp8``: OCP MX block scaling, 32 elements share an E8M0 scale (TE
  ``MXFP8BlockScaling``): fp8 rate, operands 1 + 1/32 B; the blocks run along K, so the cast
  reads 2 B and writes a row-wise and a column-wise copy, 2 (1 + 1/32) B.
- ``nvfp4``: E2M1 values in 16-element blocks with an E4M3 scale and a per-tensor FP32 scale
  (TE ``NVFP4BlockScaling``): fp4 rate, operands 1/2 + 1/16 B; a global amax pass (2 B), the
  cast read (2 B) and two copies, 2 (1/2 + 1/16) B.

Block-scaled formats need tensor cores that apply the block scales in the MMA (Blackwell's
``tcgen05`` block-scaled MMA; CDNA 4's MX instructions): a GPU lists the ones it has in
``GPU.block_formats`` and is refused any other. NVFP4 recipes keep a few layers (the last
ones) in BF16 and add random Hadamard transforms to weight-gradient inputs; neither is
modelled: every GEMM of every layer runs at the fp4 rate (an upper bound on the speed-up).
Sources: NVIDIA Transformer Engine user guide (``transformer_engine.common.recipe``);
OCP Microscaling Formats (MX) v1.0 specification; NVIDIA, "Pretraining Large Language
Models with NVFP4" (arXiv 2509.25149).
"""
from __future__ import annotations

from dataclasses import dataclass

from topologies.errors import SpecError


@dataclass(frozen=True)
class Precision:
    """``rate``: the key of ``GPU.peak_flops`` the GEMMs run at; ``operand_bytes``: bytes per
    GEMM input element (scales included); ``cast_bytes``: HBM bytes moved per element cast
    to the GEMM format; ``block_format``: the block-scaled format the tensor cores must
    support (None: none needed); ``megatron``: the Megatron-LM flags that select it."""

    name: str
    rate: str
    operand_bytes: float
    cast_bytes: float
    block_format: str | None
    megatron: tuple[str, ...]

    @property
    def quantised(self) -> bool:
        """True when GEMM inputs are cast from bf16 before each GEMM."""
        return self.cast_bytes > 0


_P = Precision
PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    _P("bf16", "bf16", 2.0, 0.0, None, ("--bf16",)),
    _P("fp16", "fp16", 2.0, 0.0, None, ("--fp16",)),
    _P("fp8", "fp8", 1.0, 3.0, None, ("--bf16", "--fp8-format hybrid")),
    _P("fp8-delayed", "fp8", 1.0, 3.0, None,
       ("--bf16", "--fp8-format hybrid", "--fp8-recipe delayed")),
    _P("fp8-current", "fp8", 1.0, 5.0, None,
       ("--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise")),
    _P("mxfp8", "fp8", 1.0 + 1 / 32, 2.0 + 2 * (1.0 + 1 / 32), "mxfp8",
       ("--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8")),
    _P("nvfp4", "fp4", 0.5 + 1 / 16, 4.0 + 2 * (0.5 + 1 / 16), "nvfp4",
       ("--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4")),
)}
DTYPES = tuple(PRECISIONS)
BLOCK_FORMATS = ("mxfp8", "mxfp4", "nvfp4")


def get_precision(name: str) -> Precision:
    """The training precision called ``name``; SpecError naming the known ones otherwise."""
    if name not in PRECISIONS:
        raise SpecError("dtype", name, f"must be one of {', '.join(DTYPES)}")
    return PRECISIONS[name]

"""Training precisions (``--dtype``): which tensor-core rate their GEMMs run at, what their
GEMM operands weigh and what their quantisation casts cost.

One row per name a public run uses. Units: bytes per element.

- ``bf16``, ``fp16``: 16-bit rate, 2-byte operands, no casts.
- ``fp8`` (= ``fp8-delayed``): per-tensor scaling from the amax *history* (Transformer
  Engine ``DelayedScaling``): the scale is known before the tensor exists, so the cast can be
  fused into the kernel that produces it (a norm or an activation writes fp8 directly).
- ``fp8-current``: per-tensor scaling from the *current* amax (TE ``Float8CurrentScaling``,
  Megatron ``--fp8-recipe tensorwise``): the amax of the whole tensor must be known before
  any element is cast, so the cast is a kernel of its own after the producer, and a tensor
  no producer fuses needs one more read pass for its amax.
- ``fp8-blockwise``: DeepSeek-V3's fine-grained scaling (1 x 128 tiles of activations and
  gradients, 128 x 128 blocks of weights, one fp32 scale each; TE ``Float8BlockScaling``,
  Megatron ``--fp8-recipe blockwise``): operands 1 + 4/128 B; the scale of a tile is its
  own amax, computed inside the cast kernel; the tiles run along K, so a tensor used with K
  on both of its axes (an activation in the forward and in the weight gradient) is cast
  twice, row-wise and column-wise.
- ``fp8-rowwise``: torchao's float8 rowwise recipe (``Float8LinearConfig.from_recipe_name(
  ROWWISE)``, torchtitan ``--float8.recipe_name rowwise``; pytorch/ao 6243040
  ``torchao/float8/config.py``): e4m3 for inputs, weights and gradients, one fp32 scale per
  row along the GEMM's K (``ScalingGranularity.AXISWISE``), rounded down to a power of two
  (``round_scales_to_power_of_2=True``); operands 1 B, the scales 4 B per row
  (``Precision.scale_bytes``, priced per GEMM by ``strategies.cost.rowwise_casts``). The
  amax of a row is a reduction inside the cast's own kernel (no amax pass, no all-reduce of
  a whole tensor's amax); a tensor whose other axis is K in the weight gradient is cast a
  second time from its bf16 copy along that axis (a column reduction: an amax kernel, then
  the cast: ``Precision.column_cast_bytes``). Only torchao runs it; it communicates in bf16
  (torchtitan ``docs/float8.md``: "For float8 with rowwise scaling, all distributed
  communication is done in high precision"; ``Precision.gathers_quantised`` False).
- ``mxfp8``: OCP MX block scaling, 32 elements share an E8M0 scale (TE
  ``MXFP8BlockScaling``): operands 1 + 1/32 B, blocks along K, so a row-wise and a
  column-wise copy, as ``fp8-blockwise``.
- ``nvfp4``: E2M1 values in 16-element blocks with an E4M3 scale and a per-tensor FP32 scale
  (TE ``NVFP4BlockScaling``): fp4 rate, operands 1/2 + 1/16 B; the per-tensor scale needs a
  global amax first (as current scaling), then the two block-scaled copies. The recipe's
  defaults (which Megatron-Core's ``get_fp4_recipe`` keeps: ``NVFP4BlockScaling()``) run all
  three GEMMs of every linear layer in NVFP4, with a random Hadamard transform (16 x 16) on
  the column-wise copies of inputs and gradients (the weight gradient's operands), 16 x 16
  2D blocks for weights and stochastic rounding for gradients. The column-wise scale is
  that of the *transformed* tensor (``with_post_rht_amax``), so no norm or activation kernel
  computes it in passing: TE then runs them unfused (``Impl::UNFUSED`` in
  ``pytorch/csrc/extensions/normalization.cpp`` and ``activation.cpp`` whenever
  ``with_rht && with_post_rht_amax``), writing bf16, and the quantizer reads it twice, once
  in ``nvte_hadamard_transform_amax`` (both amaxes in one pass) and once in
  ``nvte_quantize_with_hadamard_transform`` (row-wise and RHT column-wise copies in one
  kernel from TE v2.14; earlier releases read it a third time, two kernels:
  ``strategies.cost.quantise.TE_FUSED_RHT_CAST``; ``pytorch/csrc/quantizer.cpp``,
  ``NVFP4Quantizer::quantize_impl``): a tensor a
  producer would have fused costs as much as one cast by a kernel of its own
  (``Precision.producer_amax`` False). The Hadamard product (16 multiply-adds per element,
  on the tensor cores in the fused kernel) and the rounding's random bits add no HBM
  traffic and are not timed.

Per element cast, a quantisation moves (``Precision.cast_bytes``): the amax read pass where
the recipe needs one and no producer computes it (2 B), the bf16 read (2 B) and
``copies x operand_bytes`` written; fused into the producing kernel it moves
``copies x operand_bytes - 2`` more than that kernel's bf16 output (where the recipe needs an
amax pass, the producer computes the amax and a cast kernel reads its bf16 output: 2 B + the
copies; where the producer cannot compute the amax, nvfp4's Hadamard-transformed one, the
amax pass too: the unfused bytes). ``copies`` is 2 for
block-scaled formats, and for per-tensor fp8 on GPUs whose fp8 tensor cores take only the
"TN" layout (Hopper: the weight gradient needs transposed copies; TE's
``non_tn_fp8_gemm_supported`` is true from compute capability 10, Blackwell), else 1
(``topologies.gpus.GPU.cast_copies``). ``strategies.cost.quantise`` applies this to the
tensors of a layer.

Block-scaled formats need tensor cores that apply the block scales in the MMA (Blackwell's
``tcgen05`` block-scaled MMA; CDNA 4's MX instructions): a GPU lists the ones it has in
``GPU.block_formats`` and is refused any other. Megatron-Core can keep the first and last
layers of an fp4 run in BF16 (``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16``
/ ``--num-layers-at-end-in-bf16``, ``megatron/core/fp4_utils.py`` ``get_fp4_context``); that
is not modelled (every GEMM of every layer runs at the fp4 rate), and the public rows do not
use it: Megatron-Bridge's ``bf16_with_nvfp4_mixed`` (which its performance recipes take,
``perf_recipes/_common.py`` ``_perf_precision("nvfp4")``) leaves ``first_last_layers_bf16``
at its default False (only ``nemotron_3_super_bf16_with_nvfp4_mixed`` sets 14 end layers).
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
    GEMM input element (scales included); ``scaling``: ``"none"`` (16-bit, no casts),
    ``"delayed"``, ``"current"`` (per-tensor), ``"row"`` (a scale per row along K) or
    ``"block"`` (a scale per block along K);
    ``block_format``: the block-scaled format the tensor cores must support (None: none
    needed); ``megatron``: the Megatron-LM flags that select it (empty: Megatron has none);
    ``amax_pass``: the recipe
    needs the amax of the whole tensor before it casts any element; ``producer_amax``: a
    norm or activation kernel can compute that amax in passing (False for nvfp4, whose
    column-wise amax is of the Hadamard-transformed tensor; module doc); ``scale_bytes``:
    bytes of one row's scale where the recipe scales per row (``"row"``), else 0."""

    name: str
    rate: str
    operand_bytes: float
    scaling: str
    block_format: str | None
    megatron: tuple[str, ...]
    amax_pass: bool = False
    producer_amax: bool = True
    scale_bytes: float = 0.0

    @property
    def row_scaled(self) -> bool:
        """One scale per row along K (``scaling == "row"``, torchao's rowwise recipe): each
        GEMM casts its operands itself from bf16, along its own K (module doc)."""
        return self.scaling == "row"

    @property
    def gathers_quantised(self) -> bool:
        """Tensor- and data-parallel gathers carry the quantised tensor (TE's quantised
        all-gathers, torchao's tensorwise float8 TP and FSDP2 all-gather); False in 16 bits
        and for the rowwise recipe, whose collectives torchao leaves in bf16."""
        return self.quantised and not self.row_scaled

    def column_cast_bytes(self) -> float:
        """HBM bytes per element of a rowwise cast along the tensor's leading (strided)
        axis, the weight gradient's K for an activation or gradient and the data gradient's
        K for a weight: an amax kernel reads the bf16 tensor (2; a reduction over the
        non-contiguous axis cannot share a pass with the cast), the cast kernel reads it
        again (2) and writes the fp8 copy (``operand_bytes``); 0 unless ``row_scaled``.
        The scales' bytes are the caller's (``scale_bytes`` per reduced line)."""
        return 4.0 + self.operand_bytes if self.row_scaled else 0.0

    @property
    def quantised(self) -> bool:
        """True when GEMM inputs are cast from bf16 before each GEMM."""
        return self.scaling != "none"

    @property
    def block_scaled(self) -> bool:
        """Scales run along K, so a tensor used with K on either axis is cast twice."""
        return self.scaling == "block"

    def copies(self, tn_only: bool) -> int:
        """Copies each cast writes: 0 unquantised; 2 (row- and column-wise) for block-scaled
        formats (scales along K) and for per-tensor fp8 on ``tn_only`` tensor cores (the
        transposed copy the gradient GEMMs read); else 1."""
        if not self.quantised:
            return 0
        return 2 if self.block_scaled or tn_only else 1

    def cast_bytes(self, copies: int, fused: bool) -> float:
        """HBM bytes per element of one tensor cast to this format into ``copies`` copies
        (row-wise, and column-wise where the GEMMs need it). Unfused: the amax read where the
        recipe needs one (2), the bf16 read (2), the copies written. ``fused``: the producing
        norm or activation kernel writes the copies instead of its bf16 output (``copies x
        operand_bytes - 2``), unless the recipe needs the whole tensor's amax first, in which
        case the producer computes the amax in passing and a cast kernel still reads its
        bf16 output (2 + the copies), or, where the producer cannot compute it
        (``producer_amax`` False), the unfused bytes. Rowwise (``row_scaled``), a cast along
        the contiguous K whose amax is its own kernel's row reduction: unfused the bf16 read
        and the copies (2 + copies); fused, the copies beside the producer's bf16 output,
        which the column-wise cast of the weight gradient still reads (``copies x
        operand_bytes``). 0 for 16-bit precisions."""
        if not self.quantised:
            return 0.0
        written = copies * self.operand_bytes
        if self.row_scaled:
            return written if fused else 2.0 + written
        amax = 2.0 if self.amax_pass else 0.0
        if fused and not (self.amax_pass and not self.producer_amax):
            return 2.0 + written if self.amax_pass else written - 2.0
        return amax + 2.0 + written


_P = Precision
PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    _P("bf16", "bf16", 2.0, "none", None, ("--bf16",)),
    _P("fp16", "fp16", 2.0, "none", None, ("--fp16",)),
    _P("fp8", "fp8", 1.0, "delayed", None, ("--bf16", "--fp8-format hybrid")),
    _P("fp8-delayed", "fp8", 1.0, "delayed", None,
       ("--bf16", "--fp8-format hybrid", "--fp8-recipe delayed")),
    _P("fp8-current", "fp8", 1.0, "current", None,
       ("--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise"), amax_pass=True),
    _P("fp8-blockwise", "fp8", 1.0 + 4 / 128, "block", None,
       ("--bf16", "--fp8-format e4m3", "--fp8-recipe blockwise")),
    _P("fp8-rowwise", "fp8", 1.0, "row", None, (), scale_bytes=4.0),
    _P("mxfp8", "fp8", 1.0 + 1 / 32, "block", "mxfp8",
       ("--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8")),
    _P("nvfp4", "fp4", 0.5 + 1 / 16, "block", "nvfp4",
       ("--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"), amax_pass=True,
       producer_amax=False),
)}
DTYPES = tuple(PRECISIONS)
BLOCK_FORMATS = ("mxfp8", "mxfp4", "nvfp4")


def get_precision(name: str) -> Precision:
    """The training precision called ``name``; SpecError naming the known ones otherwise."""
    if name not in PRECISIONS:
        raise SpecError("dtype", name, f"must be one of {', '.join(DTYPES)}")
    return PRECISIONS[name]

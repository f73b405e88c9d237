"""What a published run's free-text fields say, read into specs: the GPU and network of its
``hardware``, the architecture family of its ``model``, the software of its ``source``.

Every reading that fills a gap the source leaves returns the assumption in words, so that
``paraplan validate --verbose`` can list it. Pure functions of the entry; no I/O.

>>> gpu_preset("H100-SXM 80GB")
('H100-SXM5-80GB', 'dgx-h100')
>>> parse_inter_node("8x 200 Gb/s HDR InfiniBand HCAs per node", 8)
(8, 200.0)
>>> parse_inter_node("1600 Gbps node-node RoCE", 8)
(8, 200.0)
"""
from __future__ import annotations

import re

from strategies.errors import SpecError
from strategies.schedules import DEFAULT_SCHEDULE, schedules

# (words that must all appear in the lower-cased GPU text, catalog name, cluster preset or None)
_GPU_RULES: tuple[tuple[tuple[str, ...], str, str | None], ...] = (
    (("mi300x",), "MI300X", "mi300x"),
    (("mi325x",), "MI325X", "mi325x"),
    (("mi355x",), "MI355X", "mi355x"),
    (("gb300",), "GB300", "gb300-nvl72"),
    (("gb200",), "GB200", "gb200-nvl72"),
    (("b300",), "B300-SXM-288GB", "dgx-b300"),
    (("b200",), "B200-SXM-180GB", "dgx-b200"),
    (("h200",), "H200-SXM-141GB", "dgx-h200"),
    (("h100", "pcie"), "H100-PCIe-80GB", "hgx-h100-pcie"),
    (("h100", "96gb"), "H100-96GB-500W", None),
    (("h100", "500w"), "H100-96GB-500W", None),
    (("h100",), "H100-SXM5-80GB", "dgx-h100"),
    (("h800",), "H800-SXM5-80GB", "hgx-h800"),    # H100 silicon, NVLink cut to 400 GB/s
    (("a800",), "A100-SXM4-80GB", None),          # A100 silicon, NVLink cut to 400 GB/s
    (("a100", "40gb"), "A100-SXM4-40GB", "dgx-a100-40gb"),
    (("a100", "40 gb"), "A100-SXM4-40GB", "dgx-a100-40gb"),
    (("a100",), "A100-SXM4-80GB", "dgx-a100"),
    (("v100",), "V100-SXM2-32GB", None),
)

# NVLink/NVSwitch bandwidth per GPU per direction (GB/s) for GPUs without a node preset, and
# for the export parts whose NVLink was cut (400 GB/s both directions together)
_INTRA_GBPS = {"H100-96GB-500W": 450.0, "V100-SXM2-32GB": 150.0}
_INTRA_BY_WORD = (("h800", 200.0), ("a800", 200.0))

# link generations named without a number (Gb/s per link)
_LINK_WORDS = (("xdr", 800.0), ("ndr", 400.0), ("hdr", 200.0), ("edr", 100.0),
               ("omni-path", 100.0), ("opa", 100.0))

_NUM = r"(\d+(?:\.\d+)?)"
_GBPS = r"\s*(?:gb/s|gbps|gbit/s|gb/sec|g\b)"


def gpu_preset(text: str) -> tuple[str, str | None] | None:
    """(catalog GPU, cluster preset) named by a free-text GPU field, or None if unknown."""
    t = str(text or "").lower().replace("-", " ").replace("_", " ")
    t = t.replace("96 gb", "96gb").replace("40 gb", "40gb")
    for words, gpu, preset in _GPU_RULES:
        if all(w.replace("-", " ") in t for w in words):
            return gpu, preset
    return None


# a clause (``;``-separated) that names the GPU fabric (NVLink, NVSwitch) and no scale-out
# network word describes the node's or rack's NVLink, never its NICs (the MLPerf systems
# files' "18x 5th Gen NVLink, 14.4 TB/s aggregated bandwidth", "NVLINK Gen4 900 GB/s"); one
# that names PCIe and no NIC count (``N x``) the host's bus ("Data bandwidth for GPU-PCIe:
# 504 GB/s; PCIe-NIC: 500 GB/s")
_GPU_FABRIC = re.compile(r"nvlink|nvswitch|nvl\d")
_PCIE = re.compile(r"pcie")
_NIC_COUNT = re.compile(r"\b\d+\s*(?:x|×)")
_NETWORK = re.compile(r"\b(?:infiniband|ib|roce(?:\s*v2)?|ethernet|efa|nics?|hcas?|connectx[\w-]*|"
                      r"omni-path|opa|rdma|hdr|ndr|xdr|edr|scale-out|inter-node)\b")


def network_clauses(text: str) -> str:
    """``text`` (lower case) without its ``;``-separated clauses that name NVLink or NVSwitch
    and no scale-out network, or PCIe and no NIC count (``_GPU_FABRIC``, ``_NETWORK``,
    ``_PCIE``): what ``parse_inter_node`` reads."""
    return ";".join(c for c in str(text or "").lower().split(";")
                    if (not _GPU_FABRIC.search(c) or _NETWORK.search(c))
                    and (not _PCIE.search(c) or _NIC_COUNT.search(c)))


def parse_inter_node(text: str, gpus_per_node: int) -> tuple[int, float] | None:
    """(NICs per node, Gb/s per NIC) that a free-text interconnect field states, or None.

    Reads ``N x B Gb/s`` (N links of B), ``B Gb/s per GPU`` (one link per GPU), ``B Gbps``
    or ``T Tbps`` per node or node-to-node (split over one link per GPU), ``N ... links`` of
    a named generation (HDR 200, NDR 400, Omni-Path 100 …), and ``B Gb/s`` alone (per GPU, the
    common rail-optimised layout, unless it is 1,600 or more, which only a node's total is).
    Clauses about NVLink alone are not read (``network_clauses``)."""
    t = network_clauses(text)
    n = max(1, int(gpus_per_node or 8))
    m = re.search(r"(\d+)\s*(?:x|×)\s*" + _NUM + _GBPS, t)
    if m:
        return int(m.group(1)), float(m.group(2))
    m = re.search(_NUM + _GBPS + r"\s*(?:per|/|each)\s*gpu", t) or \
        re.search(_NUM + r"g?\s*\w*\s*per\s*gpu", t)
    if m:
        return n, float(m.group(1))
    m = re.search(_NUM + r"\s*tb(?:ps|/s|it/s)", t)
    if m:
        return n, float(m.group(1)) * 1000.0 / n
    m = re.search(_NUM + _GBPS + r"(?:\s+[a-z][\w-]*){0,3}\s*"
                  r"(?:per\s*node|node[- ]to[- ]node|node-node|/\s*node)", t)
    if m:
        return n, float(m.group(1)) / n
    for word, gbps in _LINK_WORDS:
        if word in t:
            links = re.search(r"(\d+)\s*(?:x\s*)?(?:" + re.escape(word) + r")?\s*(?:\w+\s)?(?:links?|hcas?|nics?|ports?)", t)
            return (int(links.group(1)) if links else n), gbps
    m = re.search(_NUM + _GBPS, t)
    if m and float(m.group(1)) >= 10:
        g = float(m.group(1))
        # no NIC runs at 1.6 Tb/s: a figure that large is the node's total
        return (n, g / n) if g >= 1600 else (n, g)
    return None


def intra_node_gbps(gpu: str, text: str = "") -> float | None:
    """NVLink GB/s per GPU per direction for a GPU built without a node preset (``text``: the
    entry's GPU words, which name the export parts)."""
    t = str(text or "").lower()
    for word, gbps in _INTRA_BY_WORD:
        if word in t:
            return gbps
    return _INTRA_GBPS.get(gpu)


# ----------------------------------------------------------------------------- the model
_GATED = ("llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "yi-", "internlm",
          "baichuan", "olmo", "phi-3", "command", "dbrx", "granite", "codellama", "vicuna")
_ROPE = _GATED + ("nemotron", "neox", "pythia", "gpt-j", "falcon", "palm", "stablelm")
_ALIBI = ("mpt", "bloom")


def model_family(name: str) -> dict:
    """ModelSpec keyword arguments that the model's name implies (activation, positions,
    norm, biases, tied embeddings), as the model families publish them."""
    n = str(name or "").lower()
    gated = any(k in n for k in _GATED)
    nemotron = "nemotron" in n
    rope = any(k in n for k in _ROPE)
    alibi = any(k in n for k in _ALIBI)
    return dict(
        activation="swiglu" if gated else ("squared_relu" if nemotron else "gelu"),
        position_embedding="rope" if rope else ("alibi" if alibi else "learned"),
        norm="rmsnorm" if gated else "layernorm",
        tie_word_embeddings=not (gated or nemotron or "neox" in n or "pythia" in n),
        bias=not (gated or nemotron or "mpt" in n or "palm" in n),
        qkv_bias="qwen" in n,
        # the gated families (Llama, Mistral, Qwen, DeepSeek) and Nemotron-4 (arXiv 2402.16819
        # §2: "dropout rate of zero") train without dropout
        dropout=not (gated or nemotron),
        # BLOOM and its tr11 prototypes: a LayerNorm on the embeddings (BigScience's tr11 slurm
        # scripts' --embed-layernorm; HF BloomModel.word_embeddings_layernorm); BloombergGPT
        # not read here
        embedding_norm="bloom" in n and "bloomberg" not in n)


# ------------------------------------------------------------------------- the software
#: how sources name the software, first match wins: ``(words, profile)``, each profile's words
#: (JAX; torchtitan; HAI-LLM; Megatron-DeepSpeed; eager PyTorch; Megatron-LM 2021; NeMo and
#: Megatron-Bridge; Megatron-Core) before the next profile's
_FRAMEWORKS = tuple((words, name) for group, name in (
    (("maxtext", "paxml", "praxis", "t5x", "jax", "tpu", "levanter", "saxml"), "jax-xla"),
    (("torchtitan",), "torchtitan"),
    (("hai-llm", "deepseek-ai"), "hai-llm"),
    (("bigscience", "megatron-deepspeed", "gpt-neox", "deepspeed"), "megatron-deepspeed"),
    (("llm-foundry", "mosaicml", "composer", "fsdp", "metaseq", "nanotron", "lit-gpt", "litgpt",
      "huggingface accelerate"), "pytorch-eager"),
    (("narayanan",), "megatron-lm-2021"),
    (("nemo", "megatron-bridge"), "nemo"),
    (("dgxc", "mlperf", "megatron-lm readme", "megatron-core", "megatron core",
      "transformer engine"), "megatron-core")) for words in group)


def _first_named(text: str, table: tuple) -> str | None:
    """The value of ``table``'s first ``(words, value)`` row whose words ``text`` holds, or
    None (a row may name None: those words stop the search)."""
    for words, value in table:
        if words in text:
            return value
    return None


def framework_name(text: str, year: int | None) -> str:
    """The framework profile a source's text names: ``jax-xla``, ``torchtitan``, ``hai-llm``,
    ``pytorch-eager``, ``megatron-deepspeed``, ``megatron-lm-2021``, ``nemo`` (NeMo,
    Megatron-Bridge) or ``megatron-core`` (``_FRAMEWORKS``; else by year: before 2023 the
    2021 stack)."""
    name = _first_named(str(text or "").lower(), _FRAMEWORKS)
    if name is not None:
        return name
    return "megatron-lm-2021" if year is not None and year < 2023 else "megatron-core"


#: how sources name a fused attention kernel, first match wins: ``(words, kernel)`` with kernel
#: ``GPU.flash_efficiency``'s ``"fa2"`` (flash-attn 2.x, SDPA's flash backend) or ``"native"``
#: (cuDNN, Transformer Engine, FlashAttention-3), or ``"fa1"``: the FlashAttention-1 class
#: (flash-attn 1.x, llm-foundry's ``attn_impl: triton``, a pre-MLIR Triton port of v1,
#: ``llmfoundry/models/layers/flash_attn_triton.py``), whose published bars (the stack kernel
#: ``"fa1"``, ``strategies.cost.attention_fa1``) the reader does not apply (docs/calibration.md
#: §5.140); FlexAttention's Triton kernel (torch.compile) names none
_ATTN_KERNELS = (("triton", "fa1"), ("flash-attn 1", "fa1"), ("flash-attn==1", "fa1"),
                 ("flashattention-1", "fa1"), ("flash-attn 2", "fa2"), ("flash-attn==2", "fa2"),
                 ("flashattention-2", "fa2"), ("sdpa", "fa2"), ("cudnn", "native"),
                 ("transformer engine", "native"), ("flashattention-3", "native"),
                 ("fa3", "native"))


#: how sources name a context-parallel exchange, first match wins: ``(words, cp_comm)`` with
#: the plan's ``cp_comm`` values (``strategies.plan.choices.CP_COMMS``: Megatron-Core's
#: ``cp_comm_type`` "p2p" is the ring, "all_gather" the exposed K/V all-gather, "a2a" the
#: Ulysses-style QKV/O all-to-all); the hierarchical "a2a+p2p" names none
_CP_COMM = (("a2a+p2p", None), ("a2a", "a2a"), ("ulysses", "a2a"), ("all-to-all", "a2a"),
            ("all_gather", "all_gather"), ("all-gather", "all_gather"),
            ("allgather", "all_gather"), ("p2p", "p2p"), ("ring", "p2p"))


def cp_comm_type(value) -> str | None:
    """The plan ``cp_comm`` a free-text CP exchange field names (``_CP_COMM``), or None when
    it names none the model has."""
    return _first_named(str(value or "").strip().lower(), _CP_COMM)


def attention_kernel(value) -> str | None:
    """The fused attention kernel (``"native"``, ``"fa2"``, ``"fa1"``) a free-text attention
    field names (``_ATTN_KERNELS``), or None when it names none; SpecError naming
    ``plan.attn_impl`` for a value that is not a text."""
    if value is not None and not isinstance(value, str):
        raise SpecError("plan.attn_impl", value, "must be a text naming the attention kernel")
    t = (value or "").strip().lower()
    if is_flex_attention(t):   # a compiled Triton kernel, not v1's port
        return None
    return _first_named(t, _ATTN_KERNELS)


def is_flex_attention(value: object) -> bool:
    """Whether a free-text attention field names PyTorch's FlexAttention."""
    t = str(value or "").strip().lower()
    return "flexattention" in t or "flex_attention" in t


def launch_blocking(value: object) -> bool:
    """Whether a free-text environment field sets ``CUDA_LAUNCH_BLOCKING=1`` (synchronous
    kernel launches, ``strategies.launch_blocking``)."""
    return re.search(r"cuda_launch_blocking\s*=\s*1\b", str(value or "").lower()) is not None


def bf16_optimizer(value) -> bool | None:
    """Whether a free-text optimizer field says DeepSpeed's BF16_Optimizer ran (True), did not
    ("without the BF16 optimizer": False), or says neither (None)."""
    t = str(value or "").lower().replace("_", " ")
    if "bf16 optimizer" not in t:
        return None
    return re.search(r"\b(without|no|before)\s+(the\s+)?bf16 optimizer", t) is None


def recompute_kind(value) -> str | None:
    """``none``, ``selective``, ``op`` (torchtitan's op-level selective checkpointing, "SAC")
    or ``full`` from a free-text recompute field (None: unstated)."""
    if value is None:
        return None
    t = str(value).strip().lower()
    if t in ("", "null", "unknown", "not stated"):
        return None
    if t in ("false", "no", "off", "0") or t.startswith(("none", "no ")):
        return "none"
    if "op-level" in t or re.search(r"\bsac\b", t):   # torchtitan's op-level SAC
        return "op"
    if "selective" in t or "partial" in t:
        return "selective"
    return "full"


def schedule_kind(value) -> str:
    """A registered schedule's name (``gpipe``, ``interleaved``, ``1f1b``, …) or ``""``
    (unstated) from a free-text schedule: "non-interleaved" and the like mean the default
    schedule; otherwise the first schedule whose ``Schedule.text_patterns`` match, chunked
    schedules first ("interleaved 1F1B" is interleaving)."""
    t = str(value or "").lower()
    if re.search(r"(non|no|not|without)[- ](?:\w+ )?(interleav|virtual)", t):
        return DEFAULT_SCHEDULE if t.strip() else ""
    for sched in sorted(schedules(), key=lambda s: not s.chunked):
        if any(re.search(p, t) for p in sched.text_patterns):
            return sched.name
    return ""


def vocab_from_notes(notes) -> int | None:
    """A vocabulary size that a source's notes state in words ("Vocab ~250k", "vocabulary of
    50,257"), or None."""
    m = re.search(r"vocab\w*\s*(?:size)?\s*(?:of|=|:|~|≈|about)?\s*~?\s*(\d[\d,]*)\s*(k\b)?",
                  str(notes or "").lower())
    if not m:
        return None
    v = int(m.group(1).replace(",", ""))
    return v * 1000 if m.group(2) else v


#: a NeMo container as a row's source or notes name it (docs/calibration.md §5.126), each
#: spelling the reference files use: ``nvcr.io/nvidia/nemo:25.04.01`` (dgxc-benchmarking),
#: ``NeMo 25.04.01 container`` and ``(NeMo 24.07 container, ...)``, ``(26.04.01 NeMo
#: container)`` and ``25.11 NeMo container`` (Megatron-Bridge's tables), ``Container: NeMo
#: 25.02`` (the NeMo Framework performance summary's tables); the patch level is dropped
_NEMO_CONTAINER = re.compile(r"nemo:(\d\d\.\d\d)\b|\bnemo (\d\d\.\d\d)(?:\.\d\d)? container"
                             r"|\b(\d\d\.\d\d)(?:\.\d\d)? nemo container"
                             r"|\bcontainer: nemo (\d\d\.\d\d)\b", re.IGNORECASE)


def nemo_container(c: dict) -> str | None:
    """The NeMo container (``"yy.mm"``) a row's ``source`` (``ref``, ``table``, ``also``) or
    ``notes`` name (``_NEMO_CONTAINER``), else None. A row naming two containers is refused
    (``SpecError`` on ``source``): which one ran is then not said."""
    src = c.get("source") or {}
    text = " ".join(str(src.get(k) or "") for k in ("ref", "table", "also"))
    named = {next(g for g in m.groups() if g)
             for m in _NEMO_CONTAINER.finditer(f"{text} {c.get('notes') or ''}")}
    if len(named) > 1:
        raise SpecError("source", text, "names NeMo containers "
                        f"{', '.join(sorted(named))}: a row ran in one")
    return named.pop() if named else None

"""Published training runs (``strategies/reference/data/published.json``, a copy of the shared reference)
turned into Jobs, with every value the source does not give filled by a *stated* assumption.

Measured step time comes from the source's step time, or tokens/s, or its TFLOP/s with the
source's own FLOP definition (docs/formulas.md §9); each case says which.

The reading is in parts: the model, cluster and precision (``entry_specs``), the software
stack (``entry_stack``), the plan (``plan_reading``), what the plan states in so many words
(``stated_switches``) and what a recipe or router adds (``recipe_options``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from strategies.cost.system import SystemConfig
from strategies.errors import SpecError
from strategies.stacks.rules import param_gather_optimizer_rules, plan_view
from strategies.stacks.variants import compiled
from strategies.job import Job, make_job
from strategies.reference.bridge_recipes import recipe_for
from strategies.reference.perf_harness import (FP8_CS_SOURCE, GRAD_REDUCE_SOURCE, NEMO_PERF_SOURCE,
                                               OPG_OPTIMIZER_SOURCE, grad_reduce_in_fp32,
                                               harness_fp8_is_current, nemo_perf_row,
                                               param_gather_with_optimizer,
                                               stated_quant_scope)
from strategies.reference.entry_specs import entry_cluster, entry_dtype, filled_model, entry_model
from strategies.reference.entry_stack import (with_loss_of_its_date, with_mla_layout,
                                              with_source_fork, with_stated_cp, with_stated_env,
                                              with_stated_fp8_attention,
                                              with_stated_grouped_mlp, with_stated_kernel,
                                              with_te_version, framework_of)
from strategies.reference.measured import global_batch, measured_step, utilisation_step
from strategies.reference.plan_reading import (balanced_layers, parallel_sizes, entry_plan,
                                               recipe_layout_plan, slot_plan,
                                               stated_stages_plan)
from strategies.reference.recipe_options import llama_recipe_switches, routing_balance
from strategies.reference.stated_switches import (stated_compile, stated_head_deferral,
                                                  stated_param_gather, stated_size)

DATA = os.path.join(os.path.dirname(__file__), "data", "published.json")
DATA_DIR = os.path.dirname(DATA)
# files of DATA_DIR that hold no runs: the schedule papers' relative figures
NOT_RUN_FILES = ("schedule_studies.json",)


def run_file_names(data_dir: str = DATA_DIR) -> list[str]:
    """The reference files that hold runs (names in ``data_dir``, sorted): every ``.json``
    there but ``NOT_RUN_FILES``."""
    return sorted(n for n in os.listdir(data_dir)
                  if n.endswith(".json") and n not in NOT_RUN_FILES)


def held_out_file_names(data_dir: str = DATA_DIR) -> list[str]:
    """``run_file_names`` but ``published.json`` (the calibration set): the held-out files."""
    return [n for n in run_file_names(data_dir) if n != os.path.basename(DATA)]


@dataclass(frozen=True)
class Case:
    """One published run ready to estimate, or the reason it cannot be."""

    id: str
    tier: int
    measured_step_s: float | None
    how_measured: str
    job: Job | None
    assumptions: tuple[str, ...] = ()
    skipped: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)


def load_reference(path: str | None = None) -> list[dict[str, Any]]:
    from topologies.yaml_io import load_mapping_file
    data = load_mapping_file(path or DATA, "reference")
    if not isinstance(data, list):
        raise SpecError("reference", path, "must be a JSON list of cases")
    return data


def reference_cases(paths: Sequence[str] | None = None) -> Iterator[Case]:
    """Every case of the reference files ``paths`` (default: every file of the shipped
    reference data, in name order; JSON lists, a file that is not a list is skipped), in file
    then row order; a row the reader refuses (``SpecError``, a missing or malformed field) is
    skipped, as ``validate`` skips it."""
    import glob
    import json
    if paths is None:
        paths = sorted(glob.glob(os.path.join(os.path.dirname(DATA), "*.json")))
    for path in paths:
        with open(path) as fh:
            rows = json.load(fh)
        if not isinstance(rows, list):
            continue
        for r in rows:
            try:
                yield case_from_entry(r, rows)
            except (SpecError, ValueError, KeyError):
                continue


def case_from_entry(c: dict, siblings: Sequence[dict] = ()) -> Case:
    """Build the Job for one published entry, or say why not (``siblings``: the other entries
    of its reference file, read only for what the entry's source states elsewhere)."""
    step, how = measured_step(c)
    pl = c.get("plan") or {}
    base = dict(id=c["id"], tier=c.get("tier", 3), measured_step_s=step, how_measured=how, raw=c)

    def skip(why: str) -> Case:
        return Case(job=None, skipped=why, **base)

    if c.get("kind") != "measured":
        return skip("analytic reference, not a measured run")
    if c.get("duplicate_of"):
        return skip(f"the same run as {c['duplicate_of']} (the entry's notes say why)")
    if c.get("skip_reason"):        # recorded as printed, not evaluated (the entry says why)
        return skip(str(c["skip_reason"]))
    n = stated_size(c["hardware"]["n_gpus"])
    if n is None:
        return skip("hardware.n_gpus not given")
    sizes = parallel_sizes(pl, n)
    said_compile = stated_compile(c)
    if sizes is None:
        return skip("tp/pp not given")
    partition = str(pl.get("pp_partition") or "")
    if partition and "embedding counted as a block" not in partition:
        return skip(f"pipeline partition {partition!r} not read")
    *sizes, notes = sizes
    if c.get("plan_from"):      # the transcriber's stated source of the plan's cells (§5.206)
        notes.append(f"plan: {c['plan_from']}")
    mo = filled_model(c, notes, siblings)
    gbs = global_batch(c)
    if gbs is None:
        return skip("global batch not given")
    try:
        model = entry_model(mo, c, notes)
        cluster, cn = entry_cluster(c)
    except SpecError as e:
        return skip(f"does not resolve: {e}")
    notes += cn
    dtype = entry_dtype(c)
    stack = framework_of(c)
    if dtype == "fp8" and stack.unqualified_fp8 != "fp8" \
            and "delayed" not in str(c.get("precision") or "").lower():
        # a plain "fp8"/"float8" is the stack's default recipe (torchtitan: torchao's
        # tensorwise dynamic scaling; docs/calibration.md §5.142)
        dtype = stack.unqualified_fp8
        notes.append(f"precision fp8 as {stack.name} runs it unqualified, {dtype} "
                     f"({stack.unqualified_fp8_source})")
    recipe = recipe_for(c)
    # the harness's plain FP8 is current scaling: said by the row's config where the recipe
    # table holds it, else by the table's container (``harness_fp8_is_current``)
    cs_config = recipe is not None and recipe.current_scaling
    if dtype == "fp8" and (cs_config or harness_fp8_is_current(c)):
        dtype = "fp8-current"
        why = (f"the row's config {recipe.source.split()[-1]}" if cs_config
               else "the table's harness has no delayed-scaling recipe")
        notes.append(f"precision fp8 with current scaling ({why}: {FP8_CS_SOURCE})")
    if step is None:        # from a utilisation: the model's own FLOPs, before any balancing
        step, how = utilisation_step(c, model, cluster, dtype, gbs)
        base.update(measured_step_s=step, how_measured=how)
    if step is None:
        return skip("no step time, tokens/s or TFLOP/s with a known FLOP count")
    fw = with_stated_env(with_stated_kernel(stack, pl, notes), pl, notes)
    fw = with_source_fork(fw, c, notes)
    if said_compile is not None:
        try:
            fw = compiled(fw)
        except SpecError:
            return skip(f"torch.compile kernel fusion is not modelled for {fw.name}")
        notes.append(f"torch.compile: {fw.name}'s inductor-fused elementwise kernels "
                     f"(docs/calibration.md §5.69; stated: {said_compile})")
        fw = with_loss_of_its_date(c, fw, notes)
    fw = with_te_version(c, with_mla_layout(c, fw, model, notes), notes)
    try:
        fw = with_stated_grouped_mlp(fw, pl, dtype, notes)
        fw = with_stated_fp8_attention(fw, pl, dtype, cluster.gpu, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    try:        # a plan the stack's defaults make invalid (ZeRO-3 with pipelining) is skipped
        plan = stated_stages_plan(c, model, tuple(sizes), gbs, fw, notes)
        if plan is None:
            plan = slot_plan(c, model, tuple(sizes), gbs, fw, notes, bool(partition))
        if plan is None:
            plan = recipe_layout_plan(c, model, tuple(sizes), gbs, fw, notes)
        if plan is None:
            model = balanced_layers(model, sizes[1], notes)
            plan = entry_plan(c, tuple(sizes), gbs, model.num_layers, fw, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    plan = with_stated_cp(llama_recipe_switches(c, plan, notes), fw, pl, notes)
    try:
        plan = routing_balance(c, model, plan, notes)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    if param_gather_with_optimizer(c):      # where the stack's rules allow it (the plan key)
        on = replace(plan, param_gather_with_optimizer=True)
        if all(bool(ok) for _, _, ok, _ in param_gather_optimizer_rules(fw, plan_view(on))):
            plan = on
            notes.append(f"interleaved chunk 0's parameter gathers inside the optimizer step "
                         f"({OPG_OPTIMIZER_SOURCE})")
    notes.append(f"framework {fw.name} ({fw.description})"
                 + (" (stated by the entry)" if c.get("framework") is not None else ""))
    system = None
    if grad_reduce_in_fp32(c) is False:
        system = SystemConfig(grad_buffer_bytes=2.0)
        notes.append("gradients accumulated and reduced in bf16 ("
                     + (NEMO_PERF_SOURCE if nemo_perf_row(c) else GRAD_REDUCE_SOURCE) + ")")
    # (not under ZeRO-3, which gathers per layer: NeMo's scripts turn the FP8 gather off with
    # Megatron FSDP, v2.3.0 ``scripts/performance/utils.py``)
    q_ag = stated_param_gather(c, dtype, notes) if plan.zero < 3 else None
    if q_ag is not None:
        # (the same switch builds the weights quantised: no 16-bit copy, §5.151)
        system = replace(system or SystemConfig(), param_gather_bytes=q_ag[0],
                         quantised_weights=1.0)
        notes.append(f"quantised weights, stored and all-gathered after the optimizer at "
                     f"{q_ag[0]:g} byte each ({q_ag[1]})")
    defer = stated_head_deferral(c, plan.pp, notes)
    if defer is not None:
        system = replace(system or SystemConfig(), head_wgrad_deferral=defer)
    scope = stated_quant_scope(c, dtype)
    if scope is not None:
        system = replace(system or SystemConfig(), quant_scope=float(scope[0]))
        notes.append(f"the recipe's last 14 layers and attention linears in BF16, the Mamba "
                     f"out_proj in MXFP8 ({scope[1]})")
    try:
        job = make_job(model, cluster, plan, dtype=dtype, framework=fw, system=system)
    except SpecError as e:
        return skip(f"plan does not resolve: {e}")
    return Case(job=job, assumptions=tuple(notes), **base)

"""Bytes per GPU of one pipeline rank of each plan, by origin (``ORIGINS``: ``layers``,
``embedding``, ``output``, ``recompute``, ``other``) and kind (``KINDS``: ``params``,
``grads``, ``optimizer``, ``activations``, ``other``), over numpy arrays of plans
(``PlanArrays``): ``memory_component_arrays``, what the search's peak
(``peak_arrays``) and the scalar model (``strategies.memory.scalar``, entry 0 of the very
same computation) read. Every term: docs/memory.md.

The stash of in-flight micro-batches is the schedule's (``strategies.memory.activations``);
``in_flight`` lets the scalar wrapper pass it per plan, and without it the schedule's
moment with the most bytes is used (``stash_arrays``); the rank's activations at that
moment: ``rank_activations.RankActivations``. The states and the optimizer's
buffers: ``state_arrays``.

>>> from strategies.presets import model_preset
>>> from strategies.search.plan_rows import columns_from_plans
>>> from strategies.plan import parse_plan
>>> m = model_preset("gpt3-175b")
>>> P = columns_from_plans([parse_plan("tp=8,pp=8,dp=1,gbs=64,recompute=full")])
>>> parts, total = memory_component_arrays(m, P, 0)
>>> sorted(parts) == sorted(ORIGINS) and float(total[0]) == float(sum(
...     x[0] for o in ORIGINS for x in parts[o].values()))
True
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from strategies import placement
from strategies.cost import cp_allgather, param_counts, token_counts
from strategies.cost.cp_a2a import working_bytes as a2a_working_bytes
from strategies.cost.param_counts import content_params
from strategies.cost.system import SystemConfig, get_system
from strategies.layout import even_stage_content_arrays, mixed_layers
from strategies.memory.activations import permutation_buffer_bytes, stash_kinds
from strategies.memory.deepspeed_zero import rank_tensor_sizes
from strategies.memory.rank_activations import RankActivations
from strategies.memory.stage_stash import stashed_count
from strategies.memory.state_arrays import (layer_state_parts, optimizer_buffer_arrays,
                                            state_bytes_per_param)
from strategies.model import ModelSpec
from strategies.plan.choices import CP_COMMS, CP_IMPL_OF
from strategies.plan_arrays import PlanArrays, as_plan_arrays
from strategies.schedules import attr_by_code, dispatch

ORIGINS = ("layers", "embedding", "output", "recompute", "other")
KINDS = ("params", "grads", "optimizer", "activations", "other")


def runs_exchange(cp_comm, cp_impl: str | None, comm: str) -> np.ndarray:
    """Whether each plan runs K/V exchange ``comm`` (a ``CP_COMMS`` name): named by the plan
    (``PlanArrays.cp_comm``, ``1 +`` its index) or, where the plan names none (code 0), the
    stack's own (``cp_impl``, ``FrameworkProfile.cp_impl``; None: the ring). The one rule the
    estimate's memory and the search's read (``memory.scalar``, ``search.space_memory``)."""
    return np.where(np.asarray(cp_comm) == 0, cp_impl == CP_IMPL_OF[comm],
                    np.asarray(cp_comm) == 1 + CP_COMMS.index(comm))


def memory_component_arrays(m: ModelSpec, P: PlanArrays | Mapping[str, Any], stage,
                            dtype: str = "bf16", system: SystemConfig | None = None,
                            in_flight=None, layers=None, pending_w=None, content=None,
                            gpu=None, stash_layers=None, clamp=False, remat_named=False,
                            loss_bytes=None, act_cache=None, optimizer_bytes=None,
                            fsdp2=False, dispatch_bytes=None, expert_input=None,
                            te_inputs=None, mixer_d_inner=None, cp_impl=None
                            ) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray]:
    """``(components, total)`` of pipeline rank ``stage`` (an int or one per plan) of each
    plan: ``components[origin][kind]`` bytes per GPU (``ORIGINS`` x ``KINDS``) and the stage
    total (their sum). ``P``: ``PlanArrays`` or the search space's short columns; ``dtype``:
    the training precision; ``system``: the policy constants; ``in_flight``: stashed
    ``(micro-batch, chunk)`` entries per plan (default: the schedule's count with the default
    interleaving group size); ``layers``: transformer layers on the stage per plan (default
    ``num_layers / pp``; ``Job.layers_of_stage`` for uneven stages); ``pending_w``: weight
    gradients pending at the stash peak per plan (a split backward; default the schedule's
    ``pending_weight_grads_array``); ``content``: for a model with dense and MoE layers or
    MTP modules (``layout.mixed_layers``), ``{"dense", "moe", "mtp": counts per plan}``, the
    layers and modules whose parameters the rank holds (both copies where
    ``Schedule.mirrored``; ``layout.stage_content`` of the job's layout), default the plan
    columns' layout (even, first/last, slots: ``layout.even_stage_content_arrays``); each
    kind's parameters are summed (``param_counts.layer_params_split`` of the kind), and ``layers``
    is then the layers and MTP modules a micro-batch stashes here (default the content's,
    the mean of the two copies where mirrored).
    A stashed ``(micro-batch, chunk)`` holds ``layers / vpp`` layers' activations: the mean
    chunk of the stage (a layout's chunks may differ by a layer).
    ``gpu``: the chip (its fp8 layouts decide how many
    quantised weight copies a low-precision ``dtype`` keeps, ``quantise.weight_copy_bytes``,
    beside the 16-bit weights or, with ``SystemConfig.quantised_weights``, in their place:
    ``state_arrays.layer_state_bytes_per_param``).
    ``stash_layers``: the transformer layers' stash and pending ``W`` bytes at the peak per
    plan (NaN: the mean chunk's), given by the scalar model where a rank's chunks keep
    different bytes (``activations.stash_at_peak``, each entry at its own chunk's).
    ``clamp``: the stack runs gpt-oss's eager activation clamp (``framework.
    runs_eager_clamp``; its saved inputs: ``activations.clamp_activation_bytes``).
    ``remat_named``: the stack's selective recomputation is a JAX remat policy
    (``FrameworkProfile.remat_named``; ``activations.named_remat_bytes``).
    ``loss_bytes``: bytes per logit element at the loss's peak on the rank holding the head,
    or the stack's ``FrameworkProfile.loss`` (its ``peak_bytes_at(tp)`` per plan: a stack whose
    sharded-vocabulary loss holds other bytes, §5.74); ``activations.output_bytes``; None: the
    default stack's. ``act_cache``: bytes per element of the activations the stack caches in low
    precision (``activations.activation_cache_bytes``; None: the 16-bit table).
    ``optimizer_bytes``: the stack's optimizer state bytes per parameter
    (``FrameworkProfile.optimizer_state_bytes``; None: the system's). ``fsdp2``: the
    stack's ZeRO-2/3 is PyTorch FSDP2 (``FrameworkProfile.fsdp2``: the fp32 shard is the
    master, the root module's parameters stay gathered under ZeRO-3, unsharded gradients
    under pipelining; ``state_bytes_per_param``). ``dispatch_bytes``: bytes per element of the
    stack's MoE dispatch (``moe_bytes.dispatch_element_bytes``; None: 16-bit), its send
    buffer's (``activations.permutation_buffer_bytes``). ``expert_input``: bytes per element
    at which the stack's routed experts save fc1's and fc2's inputs
    (``activations.expert_input_bytes``: Transformer Engine's grouped experts in MXFP8 or
    per-tensor fp8; None: the 16-bit table). ``te_inputs``: bytes per element at which the
    stack's Transformer Engine dense modules save their inputs
    (``te_linear_saved.te_linear_input_bytes``; None: the 16-bit table). ``cp_impl``: the
    K/V exchange the stack runs as its own (``FrameworkProfile.cp_impl``; a plan naming none,
    ``PlanArrays.cp_comm`` 0; None: the ring), each row's exchange by ``runs_exchange``:
    Transformer Engine's all-gather attention's working set with ``cp > 1``
    (``cost.cp_allgather.working_bytes``, one layer at a time) in "other", its all-to-all's
    (``cost.cp_a2a.working_bytes``) too, and each layer's
    saved head-sharded output in its stash (``cost.cp_a2a.saved_delta``). ``mixer_d_inner``:
    the ``d_inner`` tensors the stack's Mamba-2 mixer saves (``FrameworkProfile.
    mamba_saved_d_inner``, ``mixer_saved.mixer_saved_delta``; None: the table's three)."""
    sy = get_system(system)
    P = as_plan_arrays(P)
    tp, pp, dp, cp, ep, b, v = P.tp, P.pp, P.dp, P.cp, P.ep, P.mbs, P.vpp
    sched, zero, flash = P.schedule, P.zero, P.flash_attn
    # micro-batches per pipeline flush (``strategies.flushes``: memory is one flush's) and
    # the interleaved micro-batch group (0: the default, ``pp``)
    nmb = P.gbs // (b * dp * P.flushes)
    grp = P.microbatch_group_size
    stage = np.asarray(stage) + np.zeros_like(pp)
    is_first, is_last = stage == 0, stage == dispatch(sched, "head_rank_array", pp, v)
    # DualPipe (``Schedule.mirrored``): rank r holds stages r and pp-1-r, both end ranks the
    # embedding and the output layer, each for the half of the micro-batches entering there
    mirrored = attr_by_code(sched, "mirrored").astype(bool)
    end = (stage == 0) | (stage == pp - 1)
    is_first, is_last = np.where(mirrored, end, is_first), np.where(mirrored, end, is_last)
    s = m.seq_length
    load = token_counts.moe_load(ep, P.moe_imbalance, P.moe_capacity_factor, m, b, tp, cp, P.etp,
                                 P.moe_pad_to_capacity)
    # TE's all-to-all CP (§5.185): the stack's own exchange (``cp_impl``) or the one a plan
    # names (``PlanArrays.cp_comm``)
    a2a = runs_exchange(P.cp_comm, cp_impl, "a2a")
    # a2a+p2p (§5.189): its all-to-all's buffers, and from Transformer Engine 2.15 on a2a's
    # saved head-sharded output (``cost.cp_hier``, §5.191; the newest releases' rule)
    hier = runs_exchange(P.cp_comm, cp_impl, "a2a+p2p")
    # the activations at the stash peak (``rank_activations``: each layer view's bytes once)
    acts = RankActivations(m, P, stage, is_first, is_last, mirrored, nmb, grp, load,
                           in_flight=in_flight, pending_w=pending_w, stash_layers=stash_layers,
                           content_given=content is not None, clamp=clamp,
                           remat_named=remat_named, loss_bytes=loss_bytes, act_cache=act_cache,
                           expert_input=expert_input, te_inputs=te_inputs,
                           mixer_d_inner=mixer_d_inner, cp_a2a=a2a | hier,
                           head_deferral=sy.head_wgrad_deferral)

    perm = permutation_buffer_bytes(m, s, b, tp, cp, load, token_counts.ACT_BYTES
                                    if dispatch_bytes is None else dispatch_bytes)

    # parameters held here (strategies.cost.param_counts) and their states, sharded over the ranks
    # holding their copies: d = dp·cp, or with hybrid sharding dp_shard·cp
    # (``placement.dense_dp_group``, the step-time model's rule), the routed experts over
    # their expert-data-parallel group (with hybrid sharding its grid within a replica)
    etp = P.etp
    dense_l, expert_l = param_counts.layer_params_split(m, tp, ep, etp)
    n_layers = m.num_layers // pp if layers is None else np.asarray(layers, dtype=float)
    held = np.where(mirrored, 2 * n_layers, n_layers)      # layers whose parameters are here
    emb_p = np.where(is_first, param_counts.embedding_params_per_gpu(m, tp), 0.0)
    head_p = np.where(is_last, param_counts.head_params_per_gpu(m, tp, pp, is_first), 0.0)
    d = placement.dense_dp_group(tp, cp, P.dp_shard)[0]
    # expert data parallelism: the ranks that hold an expert's copies
    d_e = placement.expert_dp_group(tp, cp, P.dp_shard, ep, etp)[0]
    sizes = (sy.param_bytes, sy.main_grad_bytes(dtype), sy.optimizer_bytes(optimizer_bytes))
    fs = dict(fsdp2=bool(fsdp2), pp=pp, master_bytes=sy.master_bytes,
              weight_copies=sy.weight_copies)
    per_dense = state_bytes_per_param(zero, d, *sizes, **fs)
    per_expert = state_bytes_per_param(zero, d_e, *sizes, **fs)
    # FSDP2's root module (embedding, final norm, head) is not resharded after forward: under
    # ZeRO-3 its parameters are held gathered like ZeRO-2's (FSDPState._lazy_init sets the
    # root group's post_forward_mesh_info to None)
    per_root = (state_bytes_per_param(np.where(zero == 3, 2, zero), d, *sizes, **fs)
                if fsdp2 else per_dense)

    # the layers' GEMM weights: in low precision their quantised copies too, beside the
    # 16-bit weights or in their place where the stack builds them quantised
    # (``state_arrays.layer_state_bytes_per_param``)
    qw = dict(dtype=dtype, gpu=gpu, quantised_weights=sy.quantised_weights, **fs)
    (lay_dense, q_copy), (lay_expert, _) = (layer_state_parts(zero, d, *sizes, **qw),
                                            layer_state_parts(zero, d_e, *sizes, **qw))

    def state(dense, expert=0.0, layer_weights=False, root=False):
        pd_, pe_ = (lay_dense, lay_expert) if layer_weights else (
            per_root if root else per_dense, per_expert)
        out = {k: dense * pd + expert * pe for k, pd, pe in zip(KINDS[:3], pd_, pe_)}
        if layer_weights:
            out["params"] = out["params"] + q_copy * (dense + expert)
        return out

    emb_act, out_one = acts.emb_act, acts.out_one
    # layers per chunk: the stage's mean chunk (a layout's chunks may differ by a layer)
    lpc = m.num_layers // (pp * v) if layers is None else n_layers / v
    if not mixed_layers(m):
        chunk_act, w_chunk, rc_act = acts.stash(lpc, [(m, None)])
        n_in, layers_act, out_act, activations = acts.peak_activations(chunk_act, w_chunk, rc_act)

    # other: fixed allowance, ZeRO-2/3 buffers (two gradient buckets in flight; two layers'
    # gathered parameters with ZeRO-3), fragmentation, one MoE layer's permutation buffers
    if mixed_layers(m):
        # dense and MoE layers or MTP modules: what this rank holds by kind
        # (strategies.layout.stage_content), each kind's parameters summed; DualPipe
        # (mirrored) also holds stage pp-1-r's, and a stashed micro-batch holds the layers of
        # either copy (the mean of the two)
        if content is None:
            lay = (P.first_stage_layers, P.last_stage_layers, P.account_slots)
            have = even_stage_content_arrays(m, sched, pp, v, stage, *lay)
            mirror = even_stage_content_arrays(m, sched, pp, v, pp - 1 - stage, *lay)
            content = {k: have[k] + np.where(mirrored, mirror[k], 0.0) for k in have}
            if layers is None:
                n_layers = stashed_count(m, have)
                layers = np.where(mirrored, (n_layers + stashed_count(m, mirror)) / 2, n_layers)
        shape = np.zeros_like(emb_act + out_one * is_last * stage)
        held_k = {k: np.asarray(content.get(k, 0.0), dtype=float) + shape
                  for k in m.cost_kinds() + ("mtp",)}
        if layers is None:
            raise ValueError("memory_component_arrays: content needs layers (the stash)")
        layers = np.asarray(layers, dtype=float)
        chunk_act, w_chunk, rc_act = acts.stash(layers / v, stash_kinds(m, held_k, layers))
        n_in, layers_act, out_act, activations = acts.peak_activations(chunk_act, w_chunk, rc_act)
        layer_dense, expert_params = content_params(m, held_k, tp, ep, etp, is_first)
        dense_params = layer_dense + emb_p + head_p
        # the token permutation's buffers live in an MoE layer (an MTP module's is one when
        # the model's layers are): none on a rank of dense layers only
        routed = held_k["moe"] + (held_k["mtp"] if m.is_moe else 0.0)
        perm = np.where(routed > 0, perm, 0.0)
    else:
        dense_params, expert_params = param_counts.stage_params_split(m, tp, ep, pp, stage, layers,
                                                                      mirrored=mirrored, etp=etp)
        layer_dense = held * dense_l
    # DeepSpeed's ZeRO-1/2 step: the segments its transients leave reserved (§5.129)
    head = np.maximum(emb_p, head_p)
    # the tied head's copy on a rank without the embedding: DeepSpeed's norm skips it
    tied_copy = is_last & ~is_first & bool(m.tie_word_embeddings) & (pp > 1)
    tensors, freed = rank_tensor_sizes(m, tp, b, flash, head, nmb, sy.main_grad_bytes(dtype),
                                       is_last, held)
    buffers, after, reserve = optimizer_buffer_arrays(
        sy, dtype, zero, dp, d, d_e, dense_params, expert_params, dense_l + expert_l, nmb,
        (head, held, tensors, tp, freed, tied_copy), optimizer_bytes)
    other = sy.fixed_other_bytes + buffers + sy.fragmentation * activations + perm + reserve
    # the all-gather attention's gathered K/V and dK/dV (§5.134, §5.195): the stack's own
    # exchange (``cp_impl``) or the one a plan names (``PlanArrays.cp_comm``)
    gather = runs_exchange(P.cp_comm, cp_impl, "all_gather")
    if np.any(gather):
        other = other + np.where(gather & (cp > 1), cp_allgather.working_bytes(m, b, tp, cp), 0.0)
    # the all-to-all attention's send and receive buffers (§5.185)
    if np.any(a2a) or np.any(hier):
        other = other + np.where((a2a | hier) & (cp > 1), a2a_working_bytes(m, b, tp, cp), 0.0)
    step_copy = np.maximum(0.0, after - (1.0 + sy.fragmentation) * activations)

    zero_ = np.zeros_like(activations)
    parts = {"layers": dict(state(layer_dense, expert_params, True),
                            activations=layers_act),
             "embedding": dict(state(emb_p, root=True), activations=n_in * emb_act),
             "output": dict(state(head_p, root=True), activations=out_act),
             "recompute": dict(state(zero_), activations=rc_act),
             "other": {"params": zero_, "grads": step_copy, "optimizer": zero_,
                       "activations": zero_, "other": other}}
    for part in parts.values():
        part.setdefault("other", zero_)
    total_state = sum(x for part in parts.values() for k, x in part.items() if k in KINDS[:3]
                      and part is not parts["other"])
    total = total_state + activations + other + step_copy
    return parts, total

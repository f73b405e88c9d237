"""What a stack runs once per optimizer step besides the layers: the passes over the gradient
buffer and the optimizer shard (``FrameworkProfile.step``, ``StepPasses``), and the bytes of
the tied word embedding's gradient all-reduced between the first and the last pipeline
stage. docs/formulas.md §10.

Each pass is a memory-bound kernel that streams a whole buffer once: its time is its bytes
over the GPU's usable HBM bandwidth (``hbm_rate.usable_hbm``), nothing else. Bytes per
parameter, ``g`` the gradient buffer's element (``SystemConfig.main_grad_bytes``: 4 with
bf16/fp8, 2 with fp16), ``w`` the 16-bit weight (``SystemConfig.param_bytes``):

* over the gradient buffer the GPU holds (every parameter of its stage; with ZeRO >= 2 the
  dense ``1/(dp·cp)`` and the routed experts' ``1/edp`` shares, ``comm.dp_groups.grad_buffer_params``):
  ``zero_grad`` g (written), ``scale_grad`` 2g (read and written), ``check_grad`` g (read);
* over the parameters it updates (with ZeRO >= 1 the same shares, ``comm.grad_shard_params``):
  ``grad_norm`` g (read), ``clip_scale`` 2g, ``param_copy`` 4 + w (fp32 master read, 16-bit
  weight written).

Adam's own update is ``SystemConfig.adam_step_bytes`` (``grad_time.optimizer_time``).

>>> from strategies.stacks.passes import StepPasses
>>> buffer_pass_bytes(StepPasses(), 4.0), shard_pass_bytes(StepPasses(), 4.0, 2.0)
(16.0, 10.0)
"""
from __future__ import annotations

import numpy as np

from strategies.cost import comm as cm
from strategies.cost.comm.dp_groups import grad_buffer_params
from strategies.cost.grad_time import sharded_grad_pass_time
from strategies.cost.hbm_rate import usable_hbm
from strategies.cost.system import DEFAULT_SYSTEM, SystemConfig
from strategies.cost.token_counts import Num
from strategies.stacks.passes import StepPasses
from strategies.stacks.profile import FrameworkProfile
from strategies.model import ModelSpec
from topologies.gpus import GPU


def buffer_pass_bytes(passes: StepPasses, grad_bytes: float) -> float:
    """HBM bytes per parameter of the passes over the full gradient buffer (zero, 1/dp
    scale, NaN check)."""
    return grad_bytes * (passes.zero_grad + 2 * passes.scale_grad + passes.check_grad)


def shard_pass_bytes(passes: StepPasses, grad_bytes: float, param_bytes: float) -> float:
    """HBM bytes per updated parameter of the passes over the optimizer shard (gradient
    norm, clip multiply, fp32 -> 16-bit weight copy)."""
    return (grad_bytes * (passes.grad_norm + 2 * passes.clip_scale)
            + passes.param_copy * (4.0 + param_bytes))


def step_pass_time(params_on_gpu: Num, params_updated: Num, passes: StepPasses, gpu: GPU,
                   dtype: str, system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Seconds of the per-step passes on one GPU whose gradient buffer holds ``params_on_gpu``
    parameters and which updates ``params_updated``: their bytes over the usable HBM
    bandwidth."""
    g = system.main_grad_bytes(dtype)
    nbytes = (buffer_pass_bytes(passes, g) * params_on_gpu
              + shard_pass_bytes(passes, g, system.param_bytes) * params_updated)
    return nbytes / usable_hbm(gpu, system)


def stage_pass_time(params: Num, expert_params: Num, tp: Num, cp: Num, dp: Num, ep: Num,
                    etp: Num, zero: Num, zero_g: Num, once: Num, fw: FrameworkProfile,
                    gpu: GPU, dtype: str, system: SystemConfig = DEFAULT_SYSTEM,
                    shard: Num | None = None) -> Num:
    """Seconds of the stack's per-step passes on one GPU of a stage holding ``params``
    parameters, ``expert_params`` of them routed experts: ``step_pass_time`` over the gradient
    buffer it holds (``comm.dp_groups.grad_buffer_params`` at the gradients' ZeRO stage ``zero_g``) and
    the parameters it updates (``comm.grad_shard_params`` at the plan's ``zero``), each part
    over the group that holds its copies (``comm.dp_parts``: dense ``dp·cp``, or with hybrid
    sharding ``shard·cp``; experts ``edp``); and where the gradients are reduce-scattered
    once per step (``once``, ``comm_rules.grad_sync_once``) the stack's passes over each
    part's unsharded gradient (``grad_time.sharded_grad_pass_time``, 0 for a group of one).
    The one rule the estimate, the bound and the simulator read (``stage_cost_arrays``,
    ``stage_costs``). Vectorised."""
    held = grad_buffer_params(params, expert_params, tp, cp, dp, ep, etp, zero_g, shard)
    updated = cm.grad_shard_params(params, expert_params, tp, cp, dp, ep, etp, zero, shard)
    (d, n_d, _), (e, n_e, _) = cm.dp_parts(params, expert_params, tp, cp, dp, ep, etp, shard)
    whole = (sharded_grad_pass_time(d, n_d, gpu, dtype, fw, system)
             + sharded_grad_pass_time(e, n_e, gpu, dtype, fw, system))
    return step_pass_time(held, updated, fw.step, gpu, dtype, system) \
        + np.where(once, whole, 0.0)


def tied_grad_bytes(m: ModelSpec, tp: Num, pp: Num, head_rank: Num, passes: StepPasses,
                    dtype: str, system: SystemConfig = DEFAULT_SYSTEM) -> Num:
    """Bytes per GPU of the tied word embedding's gradient all-reduced once per step between
    the first stage (the embedding) and the stage of the LM head (its copy): the
    ``V·h/tp`` gradient in the buffer's element; 0 when the embedding is not tied, with one
    stage, when the head sits on the embedding's rank (a V) or the stack does not do it."""
    on = bool(m.tie_word_embeddings and passes.tied_reduce)
    nbytes = m.vocab_size * m.hidden_size / np.asarray(tp, float) * system.main_grad_bytes(dtype)
    return np.where(on & (np.asarray(pp) > 1) & (np.asarray(head_rank) != 0), nbytes, 0.0)

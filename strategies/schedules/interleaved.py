"""Interleaved 1F1B with ``vpp`` model chunks per rank
(Megatron ``forward_backward_pipelining_with_interleaving``)."""
from __future__ import annotations

from strategies.errors import SpecError
from strategies.schedules.base import Step, check_common, register, warmup_steady_cooldown


def check_interleaved(pp: int, num_microbatches: int, vpp: int,
                      group_size: int | None) -> int:
    """Validate interleaving arguments; return the effective ``group_size`` (default ``pp``)."""
    m = num_microbatches
    g = pp if group_size is None else group_size
    if vpp < 2:
        raise SpecError("vpp", vpp, "interleaved needs virtual_pipeline_size >= 2; "
                                    "use '1f1b' for vpp=1")
    if g < pp:
        raise SpecError("group_size", g, f"must be >= pp={pp}")
    if g > m:
        raise SpecError("group_size", g, f"must be <= num_microbatches={m}")
    if m % g != 0 and m % g < pp:
        raise SpecError("num_microbatches", m,
                        f"num_microbatches % group_size (= {m % g}) must be 0 or >= pp={pp}"
                        f" (group_size={g})")
    return g


def virtual_microbatch_table(num_microbatches: int, vpp: int,
                             group_size: int) -> list[tuple[int, int]]:
    """Virtual micro-batch ``k`` -> ``(microbatch, model_chunk_id)`` of forward ``k``.

    Micro-batches go in groups of ``group_size`` (the last group takes what is left);
    inside a group over chunks, inside a chunk over the group's micro-batches.

    >>> virtual_microbatch_table(3, 2, 2)
    [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    """
    table: list[tuple[int, int]] = []
    for start in range(0, num_microbatches, group_size):
        stop = min(start + group_size, num_microbatches)
        table.extend((i, c) for c in range(vpp) for i in range(start, stop))
    return table


def num_warmup_microbatches(stage: int, pp: int, num_microbatches: int, vpp: int,
                            group_size: int | None = None) -> int:
    """Warm-up virtual micro-batches: ``min(2(pp-stage-1) + (vpp-1)*group_size, m*vpp)``."""
    check_common(stage, pp, num_microbatches)
    g = check_interleaved(pp, num_microbatches, vpp, group_size)
    return min(2 * (pp - stage - 1) + (vpp - 1) * g, num_microbatches * vpp)


@register("interleaved")
def interleaved(stage: int, pp: int, num_microbatches: int, vpp: int = 1,
                group_size: int | None = None) -> list[Step]:
    """Interleaved 1F1B order for pipeline rank ``stage``; ``vpp`` must be >= 2 and
    ``group_size`` defaults to ``pp``.

    >>> " ".join(map(str, interleaved(1, 2, 2, vpp=2)))
    'F0.c0 F1.c0 F0.c1 B0.c1 F1.c1 B1.c1 B0.c0 B1.c0'
    """
    w = num_warmup_microbatches(stage, pp, num_microbatches, vpp, group_size)
    g = pp if group_size is None else group_size
    table = virtual_microbatch_table(num_microbatches, vpp, g)
    forwards = [Step("F", i, c) for i, c in table]
    backwards = [Step("B", i, vpp - 1 - c) for i, c in table]
    return warmup_steady_cooldown(forwards, backwards, w)

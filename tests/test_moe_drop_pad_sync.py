"""``experiments/moe_drop_pad_sync.py`` (docs/calibration.md §5.114, §5.125): the alltoall
dispatcher's sync and count all-gather on the drop-and-pad rows, which the dropless path pays
and Megatron-Core skips under ``moe_pad_expert_input_to_capacity``."""
from __future__ import annotations

import pytest

from experiments import moe_drop_pad_sync as mds
from strategies.launch_blocking import HOST_PATH_S


@pytest.fixture(scope="module")
def rows():
    return mds.drop_pad_rows()


def test_every_token_drop_row_pads_and_is_charged_nothing(rows):
    """The 42 alltoall rows that state a capacity factor all pad to capacity (NeMo 2's
    ``MegatronTokenDropCallback``): the dropless path would pay a positive sync (one launch
    gap plus one operator's host path, §5.13, the same on every row) and, with ep > 1, a
    positive count all-gather; the model charges them neither."""
    assert len(rows) == 42
    for rid, ep, sync, gather, share, charged in rows:
        assert ep > 1 and gather > 0 and share > 0
        assert sync == pytest.approx(rows[0][2], rel=1e-12)
        assert HOST_PATH_S < sync < HOST_PATH_S + 1e-5
        assert charged == 0.0


def test_the_largest_share_is_llama4_on_h100(rows):
    """Llama 4 on 512 H100 at ep 128: the count all-gather over 128 ranks on 16 nodes is
    latency-bound, over a millisecond per MoE layer forward, more than 5 % of the step."""
    top = max(rows, key=lambda r: r[4])
    assert top[0].startswith("dgxc2505_llama4_400b_h100_512")
    assert top[1] == 128 and top[3] > 1e-3 and top[4] > 5.0

"""The replay of Megatron-Core's combined layer pair on its two streams
(``experiments.ep_overlap_twins.sub_module_layers``, docs/calibration.md §5.212): its closed
forms where one stream sets the pace."""

import pytest

from experiments.ep_overlap_twins import sub_module_layers


@pytest.mark.parametrize("delayed", [False, True])
def test_without_messages_a_pair_is_its_compute(delayed):
    """No all-to-all: a pair is the forward's and the backward's compute, ``F + B``."""
    a_f, m_f, m_b, a_b, a_bw = 0.7, 1.3, 2.9, 1.6, 0.4
    assert sub_module_layers(a_f, m_f, m_b, a_b, a_bw, 0.0, 0.0, delayed) == \
        pytest.approx(a_f + m_f + m_b + a_b, rel=1e-12)


@pytest.mark.parametrize("delayed", [False, True])
def test_messages_longer_than_every_piece_set_the_pace(delayed):
    """Each message longer than every compute piece: the communication stream never waits
    (the pair's first message, the backward's combine, needs no compute of the pair), and
    the last layer's backward attention ends before its forward combine, so a pair is its
    four messages, ``2·(dispatch + combine)``, at any layer count."""
    disp, comb = 3.1, 2.7
    for layers in (1, 2, 40):
        got = sub_module_layers(0.5, 0.6, 0.9, 1.1, 0.3, disp, comb, delayed, layers)
        assert got == pytest.approx(2 * (disp + comb), rel=1e-12)


def test_an_attention_bound_pair_exposes_more_than_the_lumped_rule():
    """Attention much longer than the expert MLP, messages between the two: the dispatch
    and combine cannot hide under the MLP pieces they run beside, which the lumped rule
    (``max(F, t) + max(B, t)``) misses."""
    a_f, m_f, m_b, a_b, t = 4.9, 0.15, 0.55, 4.8, 5.66
    f, b = a_f + m_f, m_b + a_b
    got = sub_module_layers(a_f, m_f, m_b, a_b, 0.0, t / 2, t / 2, False)
    assert got > max(f, t) + max(b, t) + 1.0

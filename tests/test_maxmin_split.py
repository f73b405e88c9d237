"""``maxmin.split_rates`` (the flows alone on their links in closed form, the rest solved
apart) equals ``max_min_rates`` on the whole set bit for bit, near ties included."""
from __future__ import annotations

import numpy as np

from simulator.network.maxmin import TIE_RTOL, max_min_memo, max_min_rates, split_rates


def _random_set(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A network of a few to many links and flows over 1..hops of them (the padding link
    last), some alone on their links, some sharing, some on one route, some crossing a link
    twice."""
    nlinks = int(rng.integers(2, 60))
    cap = np.append(rng.choice([1.0, 2.0, 3.0, 1e9, 2.5e11 / 3, 4.5e10], size=nlinks), np.inf)
    nflows, hops = int(rng.integers(1, 40)), int(rng.integers(1, 7))
    links = np.full((nflows, hops), nlinks, dtype=np.int32)
    for f in range(nflows):
        n = int(rng.integers(1, hops + 1))
        links[f, :n] = rng.integers(0, nlinks, size=n)
    if nflows > 2:
        links[rng.integers(0, nflows, size=nflows // 4)] = links[0]   # flows on one route
    return cap, links


def test_flows_alone_on_their_links_run_at_their_least_capacity():
    """The closed form: flows that share no link (the padding aside) each get the least
    capacity of their route, from both solvers alike."""
    rng = np.random.default_rng(7)
    for _ in range(100):
        nflows, hops = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        cap = np.append(rng.uniform(1e9, 5e11, size=nflows * hops), np.inf)
        links = np.arange(nflows * hops, dtype=np.int32).reshape(nflows, hops)
        links[:, int(rng.integers(1, hops + 1)):] = cap.size - 1      # padded rows
        want = cap[links].min(axis=1)
        assert np.array_equal(max_min_rates(cap, links), want)
        assert np.array_equal(split_rates({}, cap, links), want)


def test_split_rates_equal_the_joint_solve_bit_for_bit():
    rng = np.random.default_rng(11)
    memo: dict = {}
    split = 0
    for _ in range(600):
        cap, links = _random_set(rng)
        want = max_min_rates(cap, links)
        count = np.bincount(links.ravel(), minlength=cap.size)
        count[-1] = 0
        alone = count[links].max(axis=1) <= 1
        split += bool(alone.any() and not alone.all())
        assert split_rates(memo, cap, links).tobytes() == want.tobytes()
        assert split_rates(memo, cap, links).tobytes() == want.tobytes()   # from the memo
        assert max_min_memo({}, cap, links).tobytes() == want.tobytes()
    assert split > 100          # the sets did exercise the split


def test_a_near_tie_between_the_parts_is_solved_jointly():
    """A flow alone on a link of 1 byte/s and two flows sharing a link a hair (less than
    ``TIE_RTOL``) above 2: jointly the first round saturates both links at 1, apart the pair
    would get the hair more; ``split_rates`` must give the joint answer."""
    hair = 1.0 + TIE_RTOL / 4
    cap = np.array([1.0, 2.0 * hair, np.inf])
    links = np.array([[0], [1], [1]], dtype=np.int32)
    joint = max_min_rates(cap, links)
    assert joint.tolist() == [1.0, 1.0, 1.0]
    assert max_min_rates(cap, links[1:]).tolist() == [hair, hair]    # apart: not the same
    assert split_rates({}, cap, links).tobytes() == joint.tobytes()
    # a level clear of the tolerance is solved apart and still agrees
    cap[1] = 2.0 * (1.0 + 4 * TIE_RTOL)
    assert split_rates({}, cap, links).tobytes() == max_min_rates(cap, links).tobytes()

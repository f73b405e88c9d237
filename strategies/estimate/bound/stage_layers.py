"""Which layers each kind of rank holds, for the lower bound (``StageLayers``): an even
split, an uneven layout (``plan_arrays.rank_layers``) or a layout string
(``PlanArrays.layout_*``, docs/calibration.md §5.36 and §5.39), and how much of each rank's
parameters the stage-cost record knows."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from strategies.model import ModelSpec
from strategies.plan_arrays import PlanArrays, rank_layers


def layout_string_ends(P: PlanArrays, lay_str: np.ndarray) -> PlanArrays:
    """``P`` with the first/last-stage columns of the plans that carry a layout string
    (``lay_str``) giving rank 0's and rank pp-1's layers, so that the stage-cost record of
    the ends is theirs (exact for a model of one kind; the parameters of a middle rank are
    not known there)."""
    def given(x):       # 0 reads "not given": an end with no layer holds almost none
        return np.where(lay_str, np.maximum(np.nan_to_num(x), 1e-9), 0.0)
    return replace(P, first_stage_layers=np.where(lay_str, given(P.layout_first),
                                                  P.first_stage_layers),
                   last_stage_layers=np.where(lay_str, given(P.layout_last),
                                              P.last_stage_layers),
                   account_slots=P.account_slots & ~lay_str)


@dataclass(frozen=True, eq=False)
class StageLayers:
    """Layers per kind of rank (counts, arrays over plans): ``lpc`` the fewest of any chunk
    (for what crosses other ranks' chunks), ``lpc_most`` the largest chunk and ``lps`` the
    most layers of a rank (for the windows that hide work, subtracted), ``own`` each kind of
    rank's own layers per chunk (first, mid = rank pp-2, last, heavy: a layout string's
    heaviest middle rank); ``heavy`` the plans that price that rank; ``known`` the share
    (0 to 1) of each kind's parameter-driven terms the bound may count."""

    lpc: np.ndarray
    lpc_most: np.ndarray
    lps: np.ndarray
    own: dict[str, np.ndarray]
    heavy: np.ndarray
    known: dict[str, np.ndarray]


def stage_layers(m: ModelSpec, P: PlanArrays, lay_str: np.ndarray,
                 one_kind: bool) -> StageLayers:
    """``StageLayers`` of the plans ``P`` (``lay_str``: those carrying a layout string, their
    ends already read by ``layout_string_ends``; ``one_kind``: a model of one layer kind)."""
    pp, v = P.pp, P.vpp
    # whose parameters the record holds: a layout string's ends in a model of one kind; its
    # middle rank pp-2 holds ``n`` layers where the record has the other middle ranks' mean
    # ``n_rec``: its parameter-driven terms (data-parallel collectives, the mirror
    # all-reduce, the optimizer and the step's passes, each at most affine in the layers
    # with a non-negative constant) are scaled by min(1, n/n_rec), which only lowers them;
    # in a model of several layer kinds (the record's content by kind is the even split's)
    # they are left out
    known = {"first": np.where(~lay_str | one_kind, 1.0, 0.0),
             "last": np.where(~lay_str | one_kind, 1.0, 0.0)}
    lps = np.floor(m.num_layers / pp)
    lpc = np.floor(m.num_layers / (pp * v))
    # an uneven layout (plan_arrays.rank_layers): each kind of rank's own layers for its
    # chain, the fewest of any chunk for what crosses other ranks' chunks, the most for what
    # is subtracted (windows that hide work)
    n_first, n_mid, n_last, least, uneven = rank_layers(m.num_layers, P)
    known["mid"] = np.where(lay_str, np.where(one_kind, np.minimum(
        1.0, np.nan_to_num(P.layout_mid) / np.maximum(n_mid, 1e-12)), 0.0), 1.0)
    # a layout string's heaviest middle rank (``PlanArrays.layout_mid_most``) wherever it
    # sits: priced as a middle rank at the least position one has (s = 1: the chain into a
    # rank only grows with s), its own path only, its parameters as rank pp-2's record
    heavy = lay_str & (pp >= 4) & ~np.isnan(P.layout_mid_most)
    known["heavy"] = np.where(heavy & one_kind, np.minimum(
        1.0, np.nan_to_num(P.layout_mid_most) / np.maximum(n_mid, 1e-12)), 0.0)
    # a layout string: its own ranks' layers (rank pp-2 as "mid"; the largest virtual stage
    # times the chunks bounds every rank's layers from above)
    n_first, n_mid, n_last = (np.where(lay_str, x, y) for x, y in (
        (P.layout_first, n_first), (P.layout_mid, n_mid), (P.layout_last, n_last)))
    least = np.where(lay_str, P.layout_least, least)
    uneven = uneven | lay_str
    lpc = np.where(uneven, least, lpc)
    most_rank = np.maximum(np.maximum(n_first, n_last), np.where(pp > 2, n_mid, n_first))
    most_rank = np.where(lay_str, P.layout_most * v, most_rank)
    lpc_most = np.where(lay_str, P.layout_most,
                        np.where(uneven, np.ceil(most_rank / v), lpc))  # the largest chunk
    lps = np.where(uneven, most_rank, lps)
    own = {"first": np.where(uneven, n_first / v, lpc), "mid": np.where(uneven, n_mid / v, lpc),
           "last": np.where(uneven, n_last / v, lpc)}
    own["heavy"] = np.where(heavy, np.nan_to_num(P.layout_mid_most) / v, own["mid"])
    return StageLayers(lpc, lpc_most, lps, own, heavy, known)

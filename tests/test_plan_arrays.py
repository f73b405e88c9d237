"""PlanArrays: the named plan columns the cost model reads, and their round trip to the search
space's short columns."""
from __future__ import annotations

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.plan import Plan
from strategies.plan_arrays import SHORT, PlanArrays, as_plan_arrays
from strategies.presets import model_preset
from strategies.search.plan_rows import columns_from_plans
from strategies.search.space import SpaceOptions, enumerate_space
from topologies.cluster import cluster_preset


def test_round_trip_with_the_space_columns():
    sp = enumerate_space(model_preset("llama3-8b"), cluster_preset("dgx-h100", 2), 64,
                         SpaceOptions(max_mbs=2, max_vpp=2))
    pa = sp.arrays
    assert len(pa) == sp.size
    back = pa.to_columns()
    assert set(back) == set(sp.cols)
    for k in sp.cols:
        assert np.array_equal(back[k], sp.cols[k]), k
    # the plans rebuilt from the columns give the same arrays
    plans = [sp.plan(i) for i in range(0, sp.size, max(1, sp.size // 50))]
    again = PlanArrays.from_plans(plans)
    for name, short in SHORT.items():
        assert np.array_equal(getattr(again, name), columns_from_plans(plans)[short]), name


def test_named_fields_and_kinds():
    pa = PlanArrays.from_plans([Plan(tp=2, pp=4, dp=1, gbs=8, schedule="interleaved", vpp=2,
                                     recompute="full", tp_comm_overlap=True, sp=True)])
    assert pa.tp.dtype == float and pa.schedule.dtype == np.int64 and pa.sp.dtype == bool
    assert (pa.schedule[0], pa.recompute[0], pa.vpp[0]) == (2, 2, 2.0)
    assert pa.tp_comm_overlap[0] and as_plan_arrays(pa) is pa


def test_bad_input_names_the_rule():
    with pytest.raises(SpecError, match="must be resolved"):
        PlanArrays.from_plans([Plan(tp=2)])
    cols = columns_from_plans([Plan(tp=2, dp=1, gbs=8)])
    del cols["ogr"]
    with pytest.raises(SpecError, match="missing ogr"):
        as_plan_arrays(cols)

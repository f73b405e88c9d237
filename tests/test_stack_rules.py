"""Stack limits: one rule list (``framework.stack_rules``) read for one plan and as a mask."""
import itertools

import numpy as np
import pytest

from strategies.errors import SpecError
from strategies.framework import PROFILES, plan_violations, plan_view, stack_mask, stack_rules
from strategies.plan import Plan
from strategies.plan_arrays import PlanArrays



def _plans():
    out = []
    for tp, pp, z, rc, s, sp, cp, fa, tpo in itertools.product(
            (1, 2), (1, 2), (0, 1, 2, 3), ("none", "full", "op"),
            ("1f1b", "interleaved", "gpipe"), (False, True), (1, 2), (False, True),
            (False, True)):
        try:
            out.append(Plan(tp=tp, pp=pp, dp=2, mbs=1, gbs=64, zero=z, recompute=rc, schedule=s,
                            sp=sp, cp=cp, flash_attn=fa, tp_comm_overlap=tpo,
                            vpp=2 if s == "interleaved" else 1))
        except SpecError:
            pass        # a plan no stack may hold (e.g. interleaving without a pipeline)
    return out


PLANS = _plans()


@pytest.mark.parametrize("name", list(PROFILES))
def test_mask_and_scalar_read_the_same_rules(name):
    fw = PROFILES[name]
    arrays = PlanArrays.from_plans(PLANS)
    mask = stack_mask(fw, arrays)
    scalar = np.array([not plan_violations(fw, p) for p in PLANS])
    assert (mask == scalar).all()
    assert 0 < mask.sum() < len(PLANS)
    # rule by rule, not only the conjunction
    for k, (field, _, ok, _) in enumerate(stack_rules(fw, arrays)):
        one = [bool(stack_rules(fw, plan_view(p))[k][2]) for p in PLANS]
        assert (np.broadcast_to(ok, (len(PLANS),)) == np.array(one)).all(), field


@pytest.mark.parametrize("name", list(PROFILES))
def test_every_refusal_names_the_stack_field_and_value(name):
    fw = PROFILES[name]
    for p in PLANS:
        for field, value, rule in plan_violations(fw, p):
            assert rule.startswith(fw.name + " ")
            assert value == getattr(p, field)


def test_no_stack_named_runs_everything():
    assert stack_mask(None, PlanArrays.from_plans(PLANS)).all()

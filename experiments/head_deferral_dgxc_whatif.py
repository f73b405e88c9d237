#!/usr/bin/env python
"""What-if (docs/calibration.md §5.234, Left): ``dgxc_2505.json``'s Llama 3.1 405B, Nemotron-4
340B and Llama 3.1 70B rows at pp > 1 without FSDP, with ``head_wgrad_deferral`` at the limit
NeMo 2's ``pretrain_performance_optimizations`` sets (v2.3.0 ``recipes/llama31_405b.py``,
``llama31_70b.py``: 50; ``nemotron4_340b.py``: 22): analytic step time and last-stage / peak memory (GiB)
both ways, and each family's MAPE. Not applied to the file.

    python experiments/head_deferral_dgxc_whatif.py
"""
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import json
from dataclasses import replace
from strategies.reference.cases import DATA_DIR, case_from_entry
from strategies.estimate.scalar import estimate
from strategies.memory.scalar import memory_by_stage
G=2**30
rows=json.load(open(os.path.join(DATA_DIR, "dgxc_2505.json")))
for fam, k in (("llama31_405b", 50.0), ("nemotron_340b", 22.0), ("llama31_70b", 50.0)):
    e0=e1=n=0
    for r in rows:
        if fam not in r["id"]: continue
        c=case_from_entry(r)
        if c.skipped or c.job is None or c.job.plan.pp<2 or c.job.plan.zero==3: continue
        j=c.job; j1=replace(j, system=replace(j.system, head_wgrad_deferral=k))
        t0,t1=estimate(j).step_time_s, estimate(j1).step_time_s
        m0,m1=memory_by_stage(j),memory_by_stage(j1)
        e0+=abs(t0/c.measured_step_s-1); e1+=abs(t1/c.measured_step_s-1); n+=1
        print(f"{r['id'][:50]:50s} {c.measured_step_s:7.3f} {t0:7.3f} -> {t1:7.3f} last {m0[-1].total/G:6.1f}->{m1[-1].total/G:6.1f} peak {max(x.total for x in m0)/G:6.1f}->{max(x.total for x in m1)/G:6.1f}")
    if n: print(f"  {fam} (limit {k:g}): {n} rows {100*e0/n:.2f} -> {100*e1/n:.2f} %")

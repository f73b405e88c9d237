"""How often the estimate ranks a ZeRO-2 plan faster than its ZeRO-1 twin (docs/calibration.md
§5.108): for each surviving ZeRO-1 plan of a search space, the same plan with ``zero=2``
scored by ``estimate_arrays``, the count it ranks faster and by how much at most.

    python experiments/zero2_twins.py        # four spaces, about 30 s
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (model preset, cluster, global batch)
SPACES = (("gpt3-175b", "dgx-a100:128", 1536), ("deepseek-v3", "hgx-h800:32", 1024),
          ("mixtral-8x7b", "dgx-h100:8", 512), ("llama3-8b", "dgx-h100:2", 256))


def main() -> int:
    from strategies.estimate.analytic import estimate_arrays
    from strategies.plan_arrays import PlanArrays
    from strategies.presets import model_preset
    from strategies.search.space import SpaceOptions, enumerate_space
    from topologies.cluster import parse_cluster_arg
    print("| space | ZeRO-1 plans | ZeRO-2 twin faster | most faster | zero2_dominated |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, cl_name, gbs in SPACES:
        m, cl = model_preset(name), parse_cluster_arg(cl_name)
        sp = enumerate_space(m, cl, gbs, SpaceOptions())
        z1 = np.flatnonzero(sp.cols["zero"] == 1)
        a = {k: v[z1] for k, v in sp.cols.items()}
        b = dict(a, zero=np.full(len(z1), 2, dtype=a["zero"].dtype))
        t1, t2 = (estimate_arrays(m, cl, "bf16", PlanArrays.from_columns(x))["step_time_s"]
                  for x in (a, b))
        gain = 1 - t2 / t1 if len(z1) else np.zeros(1)
        print(f"| {name} {cl_name} gbs {gbs} | {len(z1)} | {int((t2 < t1).sum())} "
              f"| {100 * gain.max():.2f} % | {sp.pruned['zero2_dominated']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

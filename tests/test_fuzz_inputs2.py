"""Fuzzing of the commands and inputs tests/test_fuzz_recent.py does not reach: ``whatif``
(``--vary`` axes, prices, the space flags), ``compare`` (``--schedules``, the sweep),
``goodput`` and ``sensitivity`` numbers, ``--straggler``/``--degrade`` and the cluster
file's ``faults:``, mixed clusters (``a:N+b:M`` and ``node_groups:``), plan files with every
key (``framework:`` too) and ``--export``.

The rule: any input either works (exit 0) or exits 2 with one line on stderr naming field,
value and rule; never a traceback, never a hang, never an output file left behind after a
refusal, the same answer twice. Derandomized (tests/fuzz_profile.py): a few seconds by
default, ``PARAPLAN_HYPOTHESIS_SCALE=k`` runs k times as many examples and
``PARAPLAN_HYPOTHESIS_RANDOM=1`` new ones each run.
"""
from __future__ import annotations

import contextlib
import os

import pytest

from tests.fuzz_profile import run_cli

BASE = ["--model", "gpt-1.7b", "--cluster", "dgx-a100:1", "--global-batch", "16"]


def cli(argv: list[str], outputs: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``main(argv)`` in-process: exit 0, or 2 with one line on stderr, never a traceback;
    after a refusal none of ``outputs`` (paths) exists."""
    for o in outputs:
        with contextlib.suppress(FileNotFoundError):
            os.remove(o)
    rc, out, e = run_cli(argv)
    assert rc in (0, 2), (rc, argv, e[-3000:])
    assert "Traceback" not in e, e[-3000:]
    if rc == 2:
        assert e.startswith("paraplan") and e.count("\n") == 1, (argv, e)
        left = [o for o in outputs if os.path.exists(o)]
        assert not left, (argv, e, left)
    return rc, out, e


# ----------------------------------------------------------------- found by the fuzzing

@pytest.mark.parametrize("command", ["search", "whatif"])
@pytest.mark.parametrize("n", ["99999999999999999999", "100000", "257"])
def test_found_workers_sanity_limit(command, n):
    """``--workers 10**20`` overflowed a C int in the process pool (a traceback) and
    ``--workers 100000`` forked thousands of processes: at most MAX_WORKERS (256)."""
    extra = ["--vary", "nodes=1"] if command == "whatif" else []
    rc, _, e = cli([command, *BASE, *extra, "--fix", "tp=1,pp=1", "--workers", n])
    assert rc == 2 and "--workers" in e and "256" in e, e


def test_found_workers_limit_in_the_library():
    from simulator.search.executors import make_executor
    from simulator.workers import MAX_WORKERS, default_workers, process_pool
    from strategies.errors import SpecError
    assert 1 <= default_workers() <= MAX_WORKERS
    for bad in (0, MAX_WORKERS + 1, 10 ** 20):
        with pytest.raises(SpecError, match="workers"):
            make_executor("local", bad, (), lambda i: None)
        with pytest.raises(SpecError, match="workers"):
            process_pool(bad)


GOODPUT = ["goodput", *BASE, "--plan", "tp=1,mbs=1", "--analytic"]


@pytest.mark.parametrize("extra,field", [
    (["--tokens", "1e18", "--mtbf-gpu-h", "1e-300"], "checkpoint_interval_s"),
    (["--tokens", "1e9", "--interval-s", "1e-300"], "checkpoint_interval_s"),
    (["--tokens", "1e18", "--mtbf-gpu-h", "1", "--restart-s", "1e308"], "restart_s")])
def test_found_goodput_overflows(extra, field):
    """A Daly interval of 1e-298 s (MTBF 1e-300 h) made ``work / interval`` infinite and
    ``math.ceil`` raised OverflowError; a restart of 1e308 s made the expected wall time and
    GPU-hours ``inf`` (printed, and ``Infinity`` in the JSON)."""
    rc, _, e = cli([*GOODPUT, *extra])
    assert rc == 2 and field in e, e


def test_found_goodput_segments_exact():
    from strategies import goodput as gp
    from strategies.errors import SpecError
    assert gp.full_segments(10.0, 3.0) == 3 and gp.full_segments(9.0, 3.0) == 2
    assert gp.full_segments(0.0, 3.0) == 0
    assert gp.full_segments(float(gp.MAX_SEGMENTS), 1.0) == gp.MAX_SEGMENTS - 1
    with pytest.raises(SpecError, match="checkpoint_interval_s"):
        gp.full_segments(float(gp.MAX_SEGMENTS) * 2, 1.0)
    with pytest.raises(SpecError, match="restart_s"):
        gp.expected_run_s(1e6, 1e3, 10.0, 450.0, 1e308)


COMPARE = ["compare", *BASE, "--plan", "pp=2,mbs=1"]


@pytest.mark.parametrize("counts", ["1_0", "\uff12", "0x8", "1e1", "0", "4097"])
def test_found_sweep_counts_ascii(tmp_path, counts):
    """``--sweep-microbatches`` read ``int()``: "1_0" and a full-width "２" were sweeps of 10
    and 2 micro-batches (every other integer input refuses them: parse_int_text)."""
    out = str(tmp_path / "s.svg")
    rc, _, e = cli([*COMPARE, "--sweep", out, "--sweep-microbatches", counts], outputs=(out,))
    assert rc == 2 and "--sweep-microbatches" in e, e


def test_found_sweep_counts_without_sweep():
    """``--sweep-microbatches`` without ``--sweep`` was dropped without a word."""
    rc, _, e = cli([*COMPARE, "--sweep-microbatches", "4,8"])
    assert rc == 2 and "--sweep-microbatches" in e and "--sweep" in e, e


def test_sweep_counts_parsed():
    from simulator.cli.compare import parse_counts
    assert parse_counts(" 8, 4,4 ,", 2) == [4, 8]
    assert parse_counts(None, 2) == [2, 4, 8, 16]


def test_found_degrade_spellings_name_one_link(tmp_path):
    """``--degrade nic:00=2`` did not replace the cluster file's ``nic:0: 8`` (keyed by the
    text, both were kept and the larger won: 0.657 s instead of 0.244 s for ``nic:0=2``);
    ``0-nvswitch:0`` and ``nvswitch:0-gpu:0`` were two entries for one duplex link."""
    import json
    import yaml
    from topologies.faults import Faults, parse_link
    from strategies.errors import SpecError
    assert parse_link("nic:00").text == parse_link(" nic:+0 ").text == "nic:0"
    assert parse_link("nvswitch:0-gpu:3").text == parse_link("03-nvswitch:00").text \
        == "3-nvswitch:0"
    assert parse_link("nic:0.1-leaf:1.0.1").ends == parse_link("leaf:1.0.1-nic:0.1").ends
    with pytest.raises(SpecError, match="given twice"):
        Faults.from_texts(degrade=["0-nvswitch:0=2", "nvswitch:0-gpu:0=3"])
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(dict(
        name="c", gpu="A100-SXM4-80GB", nodes=2, gpus_per_node=8, intra_node_GBps=300,
        inter_node_gbps=200, nics_per_node=8, intra_node_topology="switch",
        inter_node_topology="rail_fat_tree", faults={"degrade": {"nic:0": 8}})))
    steps = set()
    for spelling in ("nic:0", "nic:00", "nic:+0"):
        rc, out, e = cli(["simulate", "--model", "gpt-1.7b", "--cluster", str(f),
                          "--global-batch", "16", "--plan", "tp=1,pp=1,mbs=1", "--json",
                          "--degrade", f"{spelling}=2"])
        assert rc == 0, e
        r = json.loads(out)
        assert r["inputs"]["cluster"]["faults"] == {"degrade": {"nic:0": 2.0}}
        steps.add(r["step_time_s"])
    assert len(steps) == 1


@pytest.mark.parametrize("text", ["dgx-h100:1+dgx-b300-2plane:1", "dgx-b300-2plane:1+dgx-h100:1"])
def test_found_mixed_cluster_planes_by_order(text):
    """A ``+`` cluster took the first term's network planes: ``dgx-h100:1+dgx-b300-2plane:1``
    had one plane and the same groups the other way round two. One fabric joins the groups,
    so its planes (and topology) are shared like the node shape."""
    from strategies.errors import SpecError
    from topologies.cluster import parse_cluster_arg
    with pytest.raises(SpecError, match="planes"):
        parse_cluster_arg(text)
    rc, _, e = cli(["estimate", "--model", "gpt-1.7b", "--cluster", text, "--global-batch",
                    "16", "--plan", "tp=2,pp=2,mbs=1"])
    assert rc == 2 and "planes=" in e, e
    assert parse_cluster_arg("dgx-b300-2plane:1+dgx-b300-2plane:1").planes == 2

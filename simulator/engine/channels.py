"""Which collective channels no other traffic ever shares a link with: the engine's
``CollectiveRunner`` times those in closed form, without the flow network (the same result,
only cheaper).
"""
from __future__ import annotations

from collections import defaultdict

from simulator.engine.collectives import CollectiveRunner
from simulator.network.backend import NetworkBackend
from simulator.program.ops import Collective, Program, Send


def exclusive_channels(programs: dict[int, Program], net: NetworkBackend,
                       runner: CollectiveRunner) -> dict[tuple, bool]:
    """``(group, tag) -> True`` when no other channel (collective group and tag, or
    point-to-point pair) ever loads one of that collective channel's links."""
    users: dict[int, set] = defaultdict(set)
    colls: dict[tuple, set] = {}
    seen: set = set()                # channels already counted (a step repeats each many times)
    streams: set = set()             # streams already counted: a group's members share ops
    for prog in programs.values():
        for ops in prog.streams.values():
            kinds = set(map(type, ops))
            if Collective in kinds:
                same = tuple(map(id, ops))
                if same in streams:
                    kinds.discard(Collective)
                streams.add(same)
            if Send in kinds:            # the pairs this stream sends to, each once
                for dst in sorted({op.dst for op in ops if type(op) is Send}):
                    ch = ("p2p", prog.rank, dst)
                    if ch not in seen:
                        seen.add(ch)
                        for link in net.links(prog.rank, dst).tolist():
                            users[link].add(ch)
            if Collective not in kinds:
                continue
            for op in ops:
                if type(op) is not Collective:
                    continue
                ch = (op.group, op.tag)
                if ch in seen or op.algorithm == "ring_stepwise":
                    continue
                seen.add(ch)
                links: set = set()
                for _, flows, _ in runner.phases(op):
                    for a, b in flows:
                        links.update(net.links(a, b).tolist())
                colls[ch] = links
                for link in links:
                    users[link].add(ch)
    return {ch: all(len(users[l]) == 1 for l in links) for ch, links in colls.items()}

"""Gantt-chart timelines of a ``SimResult`` (matplotlib, imported only when drawing).

One row per rank (rank 0 on top); with several streams, thin sub-rows per stream. Bars are
coloured by ``Record.kind`` from a fixed palette; the compute row's background is white with
a light hatch, so pipeline bubbles (idle compute) show as hatched gaps. Forward/backward
bars carry their micro-batch number when there is room. ``.png`` or ``.svg``, written
atomically; any other extension is refused before anything is drawn. A step of several
pipeline flushes draws all of them (``flush_view.all_flushes``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from simulator.result import KINDS, STREAMS, Record, SimResult
from simulator.output.chrome_trace import atomic_path
from simulator.output.flush_view import all_flushes

PALETTE = {
    "forward": "#4C78A8", "backward": "#F58518", "wgrad": "#FFBF79", "recompute": "#B279A2",
    "offload": "#D62728",   # activation offloading's exposed copies (a stalled compute stream)
    "optimizer": "#54A24B", "embedding": "#9D755D", "lm_head": "#8C6D31",
    "tp": "#E45756", "cp": "#FF9DA6", "ep": "#72B7B2", "dp": "#EECA3B",
    "pp_send": "#6F6F6F", "pp_recv": "#A9A9A9", "wait": "#E4E4E4",
}
_OTHER = ("#17BECF", "#BCBD22", "#7F7F7F", "#C49C94", "#DBDB8D")   # kinds not in PALETTE
_LETTER = {"forward": "F", "backward": "B", "wgrad": "W", "recompute": "R"}
_HATCH_COLOUR = "#C8C8C8"
_FORMATS = (".png", ".svg")
_ROW_FILL = 0.84           # fraction of a rank's band covered by its sub-rows
_CHUNK_MIX = 0.6           # the last model chunk's shade: 60 % white
#: ``--timeline-detail`` items: a memory panel, a link panel, communication lanes.
DETAILS = ("memory", "links", "comm")
_PANEL_LINES = 8           # at most this many ranks or links drawn in a detail panel


@dataclass(frozen=True)
class _Layout:
    ranks: list[int]       # ranks shown, top to bottom
    streams: list[str]     # sub-rows per rank, top to bottom
    skipped: int           # ranks left out to respect max_ranks


def _check_path(path: str | os.PathLike) -> str:
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in _FORMATS:
        raise ValueError(f"timeline extension {ext or '(none)'!r} is not supported "
                         f"(path {os.fspath(path)!r}); use .png or .svg")
    return ext[1:]


def _pick(items: Sequence[int], k: int) -> list[int]:
    """``k`` items spread evenly over ``items``, keeping the first and the last."""
    if len(items) <= k:
        return list(items)
    if k == 1:
        return [items[0]]
    return sorted({items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)})


def _layout(result: SimResult, max_ranks: int, streams: Iterable[str] | None) -> _Layout:
    if max_ranks < 1:
        raise ValueError(f"max_ranks must be >= 1, got {max_ranks}")
    present = {r.stream for r in result.records}
    order = list(STREAMS) + sorted(present - set(STREAMS))
    # a stream named by its base takes its lanes too: ``pp-comm`` shows the overlapped
    # pipeline calls' NCCL streams ``pp-comm out``/``in``/``next``/``prev`` (calibration §5.68)
    wanted = order if streams is None else list(dict.fromkeys(
        x for s in streams for x in (s, *sorted(q for q in present if q.startswith(s + " ")))))
    shown = [s for s in wanted if s in present] or [wanted[0] if wanted else "compute"]
    ranks = sorted({r.rank for r in result.records} | set(result.simulated_ranks))
    picked = _pick(ranks, max_ranks)
    return _Layout(picked, shown, len(ranks) - len(picked))


def _time_unit(span_s: float) -> tuple[str, float]:
    """Unit name and scale (units per second) for a time axis spanning ``span_s``."""
    if span_s >= 1.0:
        return "s", 1.0
    if span_s >= 1e-3:
        return "ms", 1e3
    return "µs", 1e6


def _colour(kind: str, chunk: int, chunks: int = 1) -> str:
    """Palette colour of ``kind``; with ``chunks`` model chunks, chunk ``c`` is mixed with
    white by ``_CHUNK_MIX * c / (chunks - 1)``: distinct shades for any number of chunks."""
    from matplotlib.colors import to_hex, to_rgb

    if kind in PALETTE:
        base = PALETTE[kind]
    else:
        base = _OTHER[sum(map(ord, kind)) % len(_OTHER)]
    mix = _CHUNK_MIX * max(chunk, 0) / (chunks - 1) if chunks > 1 else 0.0
    return to_hex(tuple(c + (1.0 - c) * mix for c in to_rgb(base)))


def _text_colour(fill: str) -> str:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(fill)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _short_label(rec: Record) -> list[str]:
    """Label candidates, longest first: ``F3``, then ``3``."""
    if rec.kind not in _LETTER or rec.microbatch < 0:
        return []
    return [f"{_LETTER[rec.kind]}{rec.microbatch}", f"{rec.microbatch}"]


def _draw_axes(ax, result: SimResult, lay: _Layout, scale: float, chunks: int = 1
               ) -> tuple[set[tuple[str, int]], list[tuple[Record, float, str]]]:
    """Draw one result's rows on ``ax``; return the (kind, chunk) pairs drawn and the
    bars that may carry a label, as (record, y of the bar's middle, fill colour)."""
    sub_h = _ROW_FILL / len(lay.streams)
    row_of = {r: n for n, r in enumerate(lay.ranks)}
    sub_of = {s: n for n, s in enumerate(lay.streams)}
    end = result.step_time_s * scale
    if "compute" in sub_of:   # hatched background: what stays visible is idle compute
        y0 = (1 - _ROW_FILL) / 2 + sub_of["compute"] * sub_h
        for n in range(len(lay.ranks)):
            ax.add_patch(_rect((0.0, n + y0), end, sub_h, "white", "///", _HATCH_COLOUR))
    bars: dict[tuple[float, str], list[tuple[float, float]]] = {}
    kinds: set[tuple[str, int]] = set()
    labels: list[tuple[Record, float, str]] = []
    for rec in result.records:
        if rec.rank not in row_of or rec.stream not in sub_of:
            continue
        y = row_of[rec.rank] + (1 - _ROW_FILL) / 2 + sub_of[rec.stream] * sub_h
        fill = _colour(rec.kind, rec.chunk, chunks)
        bars.setdefault((y, fill), []).append((rec.start * scale, rec.duration * scale))
        kinds.add((rec.kind, max(rec.chunk, 0)))
        if rec.kind in _LETTER:
            labels.append((rec, y + sub_h / 2, fill))
    edge = 0.4 if len(lay.ranks) <= 16 else 0.0
    for (y, fill), spans in sorted(bars.items()):
        ax.broken_barh(spans, (y, sub_h), facecolors=fill, edgecolors="white", linewidth=edge)
    ax.axvline(end, color="#444444", linewidth=0.8, linestyle="--")
    if len(lay.streams) > 1:   # separate the ranks' groups of sub-rows
        for n in range(1, len(lay.ranks)):
            ax.axhline(n, color="#D0D0D0", linewidth=0.5, zorder=0.4)
    _rank_axis(ax, result, lay)
    return kinds, labels


def _rect(xy, width, height, face, hatch, edge):
    from matplotlib.patches import Rectangle

    return Rectangle(xy, width, height, facecolor=face, hatch=hatch, edgecolor=edge,
                     linewidth=0.0, zorder=0.5)


def _label_bars(ax, labels: list[tuple[Record, float, str]], scale: float,
                sub_rows: int) -> None:
    """Write micro-batch labels (7 pt) centred in the bars they fit in, measured on the
    settled layout. With model chunks the shade tells F/B and chunk apart, so the label is
    the number alone; otherwise ``F3``, or ``3`` where ``F3`` does not fit."""
    box = ax.get_window_extent()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    px_per_unit = box.width / (x1 - x0)
    row_px = box.height / abs(y1 - y0) * _ROW_FILL / sub_rows
    font_px = 7 * ax.figure.dpi / 72
    if row_px < font_px * 1.15:
        return
    numbers_only = any(rec.chunk > 0 for rec, _, _ in labels)
    for rec, y_mid, fill in labels:
        width_px = rec.duration * scale * px_per_unit
        for text in _short_label(rec)[1 if numbers_only else 0:]:
            if width_px >= font_px * (0.62 * len(text) + 0.6):
                ax.text((rec.start + rec.duration / 2) * scale, y_mid, text, ha="center",
                        va="center", fontsize=7, color=_text_colour(fill), zorder=3,
                        clip_on=True, in_layout=False)
                break


def _rank_axis(ax, result: SimResult, lay: _Layout) -> None:
    n = len(lay.ranks)
    stage = {r.rank: r.stage for r in result.records}
    gpus = (result.metrics or {}).get("rank_gpus", {})   # a mixed cluster names the GPU type
    every = max(1, -(-n // 32))
    ticks = list(range(0, n, every))
    names = []
    for i in ticks:
        rank = lay.ranks[i]
        name = f"{rank}"
        if n <= 32 and stage.get(rank, -1) >= 0:
            name += f" (s{stage[rank]}" + (f", {gpus[rank].split('-')[0]})" if rank in gpus
                                           else ")")
        if len(result.rank_map.get(rank, ())) > 1:
            name += f" ×{len(result.rank_map[rank])}"
        names.append(name)
    ax.set_yticks([i + 0.5 for i in ticks], names, fontsize=8 if n <= 32 else 6)
    ax.set_ylim(n, 0)
    ylabel = "rank (stage)" if n <= 32 else "rank"
    if len(lay.streams) > 1:
        ylabel += "\nsub-rows: " + " / ".join(lay.streams)
    if lay.skipped:
        ylabel += f"\n({lay.skipped} ranks not shown)"
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(fig, kinds: set[tuple[str, int]], has_compute: bool, chunks: int = 1) -> None:
    """Kinds in ``KINDS`` order (later model chunks as lighter shades), then bubbles."""
    from matplotlib.patches import Patch

    names = {k for k, _ in kinds}
    order = [k for k in KINDS if k in names] + sorted(names - set(KINDS))
    handles = []
    for k in order:
        drawn = sorted(c for kk, c in kinds if kk == k)
        for c in drawn:
            label = k if len(drawn) == 1 else f"{k}, chunk {max(c, 0)}"
            handles.append(Patch(facecolor=_colour(k, c, chunks), label=label))
    if has_compute:
        handles.append(Patch(facecolor="white", hatch="///", edgecolor=_HATCH_COLOUR,
                             label="bubble (idle)"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False,
               title="kind", title_fontsize=9)


def _figure(heights: list[float]):
    """A figure on the Agg canvas, without pyplot: no global backend or figure state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = min(1.4 + 0.75 * len(heights) + 0.2 * sum(heights), 30)
    fig = Figure(figsize=(13, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": heights})
    return fig, [row[0] for row in axes]


def _save(fig, path: str | os.PathLike, fmt: str) -> None:
    with atomic_path(path, "--timeline") as tmp:
        metadata = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(tmp, format=fmt, dpi=150, metadata=metadata)


def draw_comparison(results: Sequence[tuple[str, SimResult]], path: str | os.PathLike,
                    title: str = "", max_ranks: int = 64,
                    streams: Iterable[str] | None = ("compute",), extra=(),
                    window: tuple[float, float] | None = None) -> None:
    """Stacked timelines (one panel per named result) sharing the time axis; writes ``path``.

    ``streams`` picks the sub-rows (``None``: every stream present); ``max_ranks`` caps the
    rows per panel (ranks spread evenly, the count left out is noted on the axis).
    ``extra``: more panels below, as ``(height, draw(ax, scale, span))``. ``window``:
    ``(start, end)`` seconds of the step to show (default: all of it).
    """
    fmt = _check_path(path)
    if not results:
        raise ValueError("draw_comparison needs at least one (name, SimResult)")
    streams = None if streams is None else tuple(streams)
    results = [(name, all_flushes(res)) for name, res in results]
    layouts = [_layout(res, max_ranks, streams) for _, res in results]
    import matplotlib

    # Patches read the hatch width when made; the salt makes SVG ids reproducible.
    with matplotlib.rc_context({"svg.hashsalt": "paraplan", "hatch.linewidth": 0.5}):
        fig = _draw_panels(results, layouts, title, extra, window)
        _save(fig, path, fmt)


def _draw_panels(results: Sequence[tuple[str, SimResult]], layouts: list[_Layout],
                 title: str, extra=(), window: tuple[float, float] | None = None):
    """The figure: one panel per result on a shared time axis, the ``extra`` panels, a
    legend, a title."""
    span = max([res.step_time_s for _, res in results]
               + [r.end for _, res in results for r in res.records] + [1e-12])
    lo, hi = window if window is not None else (0.0, span * 1.005)
    if not 0 <= lo < hi:
        raise ValueError(f"timeline window {window!r}: must be 0 <= start < end (seconds)")
    unit, scale = _time_unit(hi - lo if window is not None else span)
    chunks = 1 + max([r.chunk for _, res in results for r in res.records] + [0])
    fig, axes = _figure([max(len(lay.ranks), 2) * (1 + 0.5 * (len(lay.streams) - 1))
                         for lay in layouts] + [h for h, _ in extra])
    for ax, (_, draw) in zip(axes[len(results):], extra):
        ax.set_xlim(lo * scale, hi * scale)
        draw(ax, scale, span)
    kinds: set[tuple[str, int]] = set()
    pending = []
    for ax, (name, res), lay in zip(axes, results, layouts):
        ax.set_xlim(lo * scale, hi * scale)
        drawn, labels = _draw_axes(ax, res, lay, scale, chunks)
        kinds |= drawn
        pending.append((ax, labels, len(lay.streams)))
        step = res.step_time_s * scale
        ax.set_title(f"{name}   step {step:.4g} {unit}" if name else f"step {step:.4g} {unit}",
                     fontsize=10, loc="left")
    axes[-1].set_xlabel(f"time ({unit})")
    _legend(fig, kinds, any("compute" in lay.streams for lay in layouts), chunks)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.draw_without_rendering()   # settle the layout: bar widths in pixels decide labels
    fig.set_layout_engine("none")  # and keep it, so the labels land where they were measured
    for ax, labels, sub_rows in pending:
        _label_bars(ax, labels, scale, sub_rows)
    return fig


def check_detail(items: Iterable[str]) -> tuple[str, ...]:
    """``items`` checked against ``DETAILS``, case-insensitive (``ValueError`` naming the valid
    ones); an empty item or one given twice is refused (a typo, not a choice)."""
    out: list[str] = []
    for i in items:
        name = str(i).strip().lower()
        if not name:
            raise ValueError("an item is empty; give comma-separated items of "
                             + ", ".join(DETAILS))
        if name not in DETAILS:
            raise ValueError(f"unknown timeline detail {name!r}; valid: {', '.join(DETAILS)}")
        if name in out:
            raise ValueError(f"timeline detail {name!r} is given twice")
        out.append(name)
    return tuple(out)


def draw_timeline(result: SimResult, path: str | os.PathLike, title: str = "",
                  max_ranks: int = 64, streams: Iterable[str] | None = ("compute",),
                  detail: Iterable[str] = (),
                  window: tuple[float, float] | None = None) -> None:
    """Gantt chart of one result written to ``path`` (``.png`` or ``.svg``); ``window``:
    ``(start, end)`` seconds of the step to show (default: all of it).

    ``streams`` picks the sub-rows per rank, e.g. ``("compute", "pp-comm")``; ``None``
    draws every stream present. More than ``max_ranks`` ranks are thinned evenly.
    ``detail`` (``DETAILS``): ``memory`` adds a panel of each simulated rank's stashed
    activation memory over time, ``links`` a panel of the busiest links' utilisation over
    time (needs ``simulate(..., link_series=True)``), ``comm`` draws every stream.
    """
    detail = check_detail(detail)
    result = all_flushes(result)        # every pipeline flush of the step (flush_view)
    extra = []
    if "memory" in detail:
        extra.append((3.0, lambda ax, scale, span: _memory_panel(ax, result, scale, span)))
    if "links" in detail:
        extra.append((3.0, lambda ax, scale, span: _links_panel(ax, result, scale, span)))
    draw_comparison([("", result)], path, title=title, max_ranks=max_ranks,
                    streams=None if "comm" in detail else streams, extra=extra,
                    window=window)


def _steps(ax, series: list[tuple[float, float]], scale: float, span: float, factor: float,
           label: str) -> None:
    """A step series (held until ``span``) on ``ax``, times × ``scale``, values × ``factor``."""
    last = {t: v for t, v in series}          # same-instant changes: the last one holds
    xs = [t * scale for t in last] + [span * scale]
    ys = [v * factor for v in last.values()] + [series[-1][1] * factor]
    ax.step(xs, ys, where="post", linewidth=1.0, label=label)


def _panel_style(ax, ylabel: str, drawn: int) -> None:
    ax.set_ylabel(ylabel, fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", color="#E0E0E0", linewidth=0.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if drawn:
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _memory_panel(ax, result: SimResult, scale: float, span: float) -> None:
    """Stashed activation memory (GiB) of up to ``_PANEL_LINES`` simulated ranks."""
    from topologies.gpus import GIB
    memory = result.metrics.get("activation_memory", {})
    stage = {r.rank: r.stage for r in result.records}
    ranks = _pick(sorted(memory), _PANEL_LINES)
    for rank in ranks:
        _steps(ax, memory[rank], scale, span, 1 / GIB, f"rank {rank} (s{stage.get(rank, 0)})")
    _panel_style(ax, "activation\nmemory (GiB)", len(ranks))


def _links_panel(ax, result: SimResult, scale: float, span: float) -> None:
    """Utilisation (% of line rate) of up to ``_PANEL_LINES`` of the busiest links."""
    series = result.metrics.get("link_series", {})
    rows = [r for r in result.metrics.get("link_utilisation", []) if r["link"] in series]
    for row in rows[:_PANEL_LINES]:
        s = series[row["link"]]
        _steps(ax, s["utilisation"], scale, span, 100.0, f"{s['kind']} {row['link']}")
    if not rows:
        ax.text(0.5, 0.5, "no link series recorded", transform=ax.transAxes, ha="center",
                fontsize=8, color="#666666")
    _panel_style(ax, "link\nutilisation (%)", min(len(rows), _PANEL_LINES))

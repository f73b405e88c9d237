"""Small helpers for the study plots (parity, bubble sweep, analytic vs simulated).

matplotlib is imported only inside these functions, on the Agg canvas without pyplot (no
global state), and figures are written atomically with no date in their metadata, so the
same data gives the same file.
"""
from __future__ import annotations

import os

from strategies.errors import SpecError

FORMATS = (".png", ".svg")


def check_figure_path(path: str | os.PathLike, field: str = "plot") -> str:
    """The format (``png``/``svg``) of ``path``; a ``SpecError`` for any other extension."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise SpecError(field, os.fspath(path), "must end with .png or .svg")
    return ext[1:]


def new_figure(size: tuple[float, float], ncols: int = 1, nrows: int = 1):
    """``(figure, axes)``: one axes, or an array of them when ``nrows``/``ncols`` > 1."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=True)
    return fig, axes


def save_figure(fig, path: str | os.PathLike, dpi: int = 150, field: str = "--plot") -> None:
    """Write ``fig`` to ``path`` atomically (a failed write is a SpecError naming ``field``,
    the flag that named the file)."""
    import matplotlib

    from simulator.output.chrome_trace import atomic_path
    fmt = check_figure_path(path)
    metadata = {"Date": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "paraplan"}):
        with atomic_path(path, field) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)

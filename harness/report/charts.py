"""The report's charts (matplotlib, PNG): seed 003's path, optimization ratios against
their bounds, the worst parity margins. Text from run files is plain text here.

Each chart's title is its section's caption (Section.caption, which the page shows under
the image): pass it as ``title``; the default says the same as the caption sections.py
writes. Ratios are on log axes: a memory ratio of 0.1 and a time ratio of 20 are each
drawn as far from the baseline (1) as they are."""
from __future__ import annotations

import math
import textwrap
import warnings

from harness.report.matrix import KEY_COLOURS


CHART_ROWS = 60           # rows of one chart at most


WORST_CHARTED = 25        # parity checks in the worst-margins chart


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def _plain(text: str, at_most: int = 80) -> str:
    """A label for matplotlib: no mathtext (a "$" in a check id or host name is just a dollar)."""
    text = text if len(text) <= at_most else text[:at_most - 1] + "…"
    return text.replace("$", r"\$")


def _png(fig) -> bytes:
    import io
    buf = io.BytesIO()
    with warnings.catch_warnings():  # glyphs the font lacks (CJK, emoji in a host name) are drawn as boxes
        warnings.simplefilter("ignore")
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def _title(text: str, width: int = 95) -> str:
    """A chart's title: plain text, wrapped (the page shows the same words as its caption)."""
    return "\n".join(textwrap.wrap(_plain(text, at_most=400), width)) or " "


def _plain_log(axis, low: float, high: float) -> None:
    """Ticks of a log axis as plain numbers (0.5, 1, 20), 1-2-5 when it spans few decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    decades = math.log10(high / low) if 0 < low < high else 1.0
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)))
    axis.set_minor_locator(LogLocator(base=10, subs="auto"))
    axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def path_title(label: str) -> str:
    return f"Peak memory and step time of each step, x the first row (log scale), on {label}"


def _positive(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def path_chart(label: str, rows: list[dict], title: str | None = None) -> bytes:
    """Seed 003's path as a PNG; ``title``: the section's caption (default: ``path_title``)."""
    return _png(path_figure(label, rows, title))


def path_figure(label: str, rows: list[dict], title: str | None = None):
    """Seed 003's path: each row's peak memory and step time as a ratio to the first row,
    in two panels, each on its own log axis (memory falls below 1, time climbs far above it),
    each bar drawn from the baseline (1) to the ratio and labelled with it."""
    plt = _pyplot()
    base = rows[0]
    names = [_plain(r["row"], at_most=30) for r in rows]
    mem = [_positive(r["peak_bytes"] / base["peak_bytes"]) if base.get("peak_bytes") else None for r in rows]
    step = [_positive(r.get("time_ratio", r["step_s"] / base["step_s"] if base.get("step_s") else None))
            for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9), dpi=100, layout="constrained")
    for ax, values, what, colour in ((axes[0], mem, "peak memory", "#1f77b4"), (axes[1], step, "step time", "#e07b00")):
        xs = list(range(len(rows)))
        shown = [(x, v) for x, v in zip(xs, values) if v is not None]
        ax.bar([x for x, _ in shown], [v - 1.0 for _, v in shown], bottom=1.0, width=0.6, color=colour)
        for x, v in shown:
            ax.annotate(f"x{v:.3g}", (x, v), xytext=(0, 3 if v >= 1 else -3), textcoords="offset points",
                        ha="center", va="bottom" if v >= 1 else "top", fontsize=7)
        top = max([v for _, v in shown] + [1.0])
        bottom = min([v for _, v in shown] + [1.0])
        ax.set_yscale("log")
        ax.set_ylim(bottom / 1.8, top * 1.8)
        _plain_log(ax.yaxis, bottom / 1.8, top * 1.8)
        ax.axhline(1.0, color="#555", linewidth=0.9)
        ax.grid(axis="y", color="#e4e4e4", linewidth=0.6)
        ax.set_xticks(xs, names, rotation=25, ha="right", fontsize=8)
        ax.set_title(f"{what}, x the first row (log)", fontsize=9)
    fig.suptitle(_title(title or path_title(label)), fontsize=10)
    return fig


def _dot_chart(labels: list[str], height_per_row: float = 0.22):
    """A figure with one row per label, top to bottom, ready for dots on a log x axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.7 + height_per_row * len(labels)), dpi=90, layout="constrained")
    ys = list(range(len(labels)))[::-1]
    ax.set_yticks(ys, [_plain(t) for t in labels], fontsize=7)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_xscale("log")
    ax.grid(axis="x", color="#ddd", linewidth=0.6)
    return fig, ax, ys


def ratio_title(points: list[tuple]) -> str:
    return (f"Measured ratio (dot) with its 95% interval against the bound the claim must stay under (red tick), "
            f"log scale: {len(points)} claims x quantities x columns")


def ratio_chart(points: list[tuple], title: str | None = None) -> bytes:
    """The claims' ratios as a PNG; ``title``: the section's caption (default: ``ratio_title``)."""
    return _png(ratio_figure(points, title))


def ratio_figure(points: list[tuple], title: str | None = None):
    """Each claim x quantity x column: the measured ratio (dot, coloured by verdict) with
    its interval, and the bound it had to stay under (red tick)."""
    fig, ax, ys = _dot_chart([p[0] for p in points])
    for y, (_, ratio, low, high, bound, key) in zip(ys, points):
        if low and high:
            ax.plot([low, high], [y, y], color="#555", linewidth=1)
        if bound:
            ax.plot([bound], [y], marker="|", color="#c62828", markersize=11, markeredgewidth=2)
        ax.plot([ratio], [y], "o", color=KEY_COLOURS.get(key, "#999"), markeredgecolor="#333", markersize=6)
    ax.axvline(1.0, color="#888", linewidth=0.8)
    ax.set_xlabel("variant / baseline (log)", fontsize=8)
    _plain_log(ax.xaxis, *ax.get_xlim())
    fig.suptitle(_title(title or ratio_title(points), 110), fontsize=9)
    return fig


def margin_title(charted: list) -> str:
    return (f"The {len(charted)} largest finite margins over every column and dtype (log scale; past the red line "
            "at 1: outside tolerance)")


def margin_chart(charted: list[tuple[str, float, str]], title: str | None = None) -> bytes:
    """The worst margins as a PNG; ``title``: the section's caption (default: ``margin_title``)."""
    return _png(margin_figure(charted, title))


def margin_figure(charted: list[tuple[str, float, str]], title: str | None = None):
    """The worst parity margins (largest error / allowed error), log scale; 1 is the tolerance."""
    fig, ax, ys = _dot_chart([c[0] for c in charted])
    for y, (_, margin, key) in zip(ys, charted):
        ax.plot([min(margin, 1.0), margin], [y, y], color="#bbb", linewidth=1)
        ax.plot([margin], [y], "o", color=KEY_COLOURS.get(key, "#999"), markeredgecolor="#333", markersize=6)
    ax.axvline(1.0, color="#c62828", linewidth=1)
    ax.set_xlabel("margin = largest error / allowed error (log)", fontsize=8)
    _plain_log(ax.xaxis, *ax.get_xlim())
    fig.suptitle(_title(title or margin_title(charted), 110), fontsize=9)
    return fig

"""The report's charts (matplotlib, PNG): seed 003's path, optimization ratios against
their bounds, the worst parity margins. Text from run files is plain text here."""
from __future__ import annotations

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
        fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def path_chart(label: str, rows: list[dict]) -> bytes:
    plt = _pyplot()
    base = rows[0]
    names = [_plain(r["row"]) for r in rows]
    mem = [r["peak_bytes"] / base["peak_bytes"] for r in rows]
    step = [r.get("time_ratio", r["step_s"] / base["step_s"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], mem, width=0.4, label="peak memory")
    ax.bar([x + 0.2 for x in xs], step, width=0.4, label="step time")
    ax.axhline(1.0, color="#888", linewidth=0.8)
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("x baseline")
    ax.set_title(_plain(f"seed 003's path on {label}"), fontsize=10)
    ax.legend(fontsize=8)
    return _png(fig)


def _dot_chart(labels: list[str], height_per_row: float = 0.22):
    """A figure with one row per label, top to bottom, ready for dots on a log x axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.3 + height_per_row * len(labels)), dpi=90)
    ys = list(range(len(labels)))[::-1]
    ax.set_yticks(ys, [_plain(t) for t in labels], fontsize=7)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_xscale("log")
    ax.grid(axis="x", color="#ddd", linewidth=0.6)
    return fig, ax, ys


def ratio_chart(points: list[tuple]) -> bytes:
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
    ax.set_xlabel("variant / baseline (log); red tick: the bound for the claim to hold")
    ax.set_title("Optimization claims: measured ratio vs the documents' bound", fontsize=10)
    return _png(fig)


def margin_chart(charted: list[tuple[str, float, str]]) -> bytes:
    """The worst parity margins (largest error / allowed error), log scale; 1 is the tolerance."""
    fig, ax, ys = _dot_chart([c[0] for c in charted])
    for y, (_, margin, key) in zip(ys, charted):
        ax.plot([min(margin, 1.0), margin], [y, y], color="#bbb", linewidth=1)
        ax.plot([margin], [y], "o", color=KEY_COLOURS.get(key, "#999"), markeredgecolor="#333", markersize=6)
    ax.axvline(1.0, color="#c62828", linewidth=1)
    ax.set_xlabel("margin = largest error / allowed error (log); past the red line: outside tolerance")
    ax.set_title(f"Numerical parity: the {len(charted)} worst margins", fontsize=10)
    return _png(fig)

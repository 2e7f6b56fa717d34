"""The PNG: each figure's median against its floor's (log scale), marked met or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# A row's `met`: True, False, or None for a row only reported (a paced floor, a size, the skeleton).
COLORS = {True: "tab:green", False: "tab:red", None: "tab:blue"}


def plot(rows: list[dict[str, Any]], path: Path, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A bar on a log scale needs a ratio: counts whose floor is 0 (missed deliveries) stay in the table.
    shown = [
        r for r in rows if r["value"]["median"] and r["floor_value"]["median"] and r["ratio"] is not None
    ]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(shown) + 1.5))
    labels = [f"#{r['id']} {r['figure'][:48]} ({r['unit']})" for r in shown]
    y = range(len(shown))
    ax.barh(
        [i + 0.2 for i in y],
        [r["value"]["median"] for r in shown],
        height=0.4,
        color=[COLORS[r["met"]] for r in shown],
        label="desk (median)",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [r["floor_value"]["median"] for r in shown],
        height=0.4,
        color="tab:gray",
        label="floor (median)",
    )
    for i, r in enumerate(shown):
        ax.text(
            max(r["value"]["median"], r["floor_value"]["median"]) * 1.1,
            i,
            f"{r['ratio']:.2f}x (target {r['target']})",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_title(f"Review Desk bench: {title} (green met, red missed, blue reported: no target)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

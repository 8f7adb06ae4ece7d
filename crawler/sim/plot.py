"""Ratio to the limit against slots, one line per run, as a PNG (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crawler.sim.runner import RunResult


def plot_ratios(results: Sequence[RunResult], path: str | Path, *, title: str = "") -> Path:
    """Write the plot to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    out = Path(path)
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    try:
        for res in results:
            label = res.scheduler + (f" {_params(res)}" if res.params else "")
            ax.plot(res.series["slot"], res.series["ratio"], label=label, linewidth=1.3)
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label="limit")
        ax.set_xlabel("slot")
        weighted = any(res.env.weighted for res in results)
        ax.set_ylabel("weighted hits / limit" if weighted else "hits per slot / limit")
        ax.set_ylim(bottom=0.0)
        if title:
            ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out


def _params(res: RunResult) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(res.params.items()))

"""Ratio to the limit against slots, one line per run, as a PNG (matplotlib, Agg).

matplotlib is an optional dependency (the ``plot`` extra): nothing else of the project needs
it, and it is the heaviest package to install. It is imported only when a plot is drawn;
``require_matplotlib`` lets the CLI refuse ``--plot`` before a long simulation, not after.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from crawler.sim.runner import RunResult

INSTALL_HINT = "pip install 'crawler[plot]'"


class PlotUnavailableError(ValueError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailableError`, saying how to install it, if matplotlib is missing."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        found = False
    if not found:
        raise PlotUnavailableError(
            f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
        )


def plot_ratios(results: Sequence[RunResult], path: str | Path, *, title: str = "") -> Path:
    """Write the plot to ``path`` and return it (:class:`PlotUnavailableError` if matplotlib
    is missing)."""
    require_matplotlib()
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

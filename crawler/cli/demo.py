"""``crawler demo``: watch a local changing site and learn live."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from crawler.cli._app import app
from crawler.cli._common import err_console, fail

if TYPE_CHECKING:  # imported by the command: the other commands need none of it
    from crawler.demo import DemoOptions, DemoProgress


#: what the demo's "limit" is, printed under its figures
LIMIT_MEANING = (
    "limit: the changes per slot the best possible polling would catch with these polls, "
    "knowing every page's true rate of change (the analytic optimum); a scheduler learns "
    "the rates as it goes, so its ratio to the limit climbs towards 1."
)


def _view(progress: DemoProgress, options: DemoOptions) -> Table:
    """The live figures, one per line: fits 80 columns (a row of seven columns did not)."""
    table = Table(
        title=f"crawler demo: {options.urls} pages changing at Zipf rates,\n"
        f"{options.capacity:g} polls per {options.slot_seconds:g} s slot, "
        f"scheduler {options.scheduler}",
        show_header=False,
        width=min(err_console.width, 80),
    )
    table.add_column("figure", no_wrap=True, ratio=2)
    table.add_column("value", overflow="fold", ratio=3)
    limit = max(progress.limit, 1e-12)
    bar = "#" * int(30 * min(progress.ratio, 1.0))
    table.add_row("slot", f"{progress.slot}/{options.slots}")
    table.add_row(
        "changes caught per slot", f"{progress.hits_per_slot:.3f} (last {options.window} slots)"
    )
    table.add_row("limit", f"{progress.limit:.3f}")
    table.add_row("ratio to limit", f"{progress.ratio:.2f} {bar}")
    table.add_row(
        "uniform polling would get", f"{progress.uniform:.3f} ({progress.uniform / limit:.2f})"
    )
    table.add_row("polls, errors", f"{progress.polls}, {progress.errors}")
    return table


@app.command()
def demo(
    urls: int = typer.Option(300, help="Pages on the local site."),
    capacity: float = typer.Option(3.0, help="Polls per slot."),
    slot_seconds: float = typer.Option(0.1, help="Slot length in seconds."),
    slots: int = typer.Option(600, help="Slots to run (600 x 0.1 s is about a minute)."),
    scheduler: str = typer.Option("bayes", help="Scheduler to learn with."),
    database: Path | None = typer.Option(None, help="SQLite file to keep (default: temporary)."),
    seed: int = typer.Option(1, help="Random seed of the site and the scheduler."),
) -> None:
    """The embedded default: a local site whose pages change at Zipf rates, watched by the
    service on SQLite, showing the hit rate per slot against the analytic limit."""
    if urls < 1 or capacity <= 0 or slot_seconds <= 0 or slots < 1:
        fail("--urls, --capacity, --slot-seconds and --slots must be positive")
    from crawler.demo import DemoOptions, DemoProgress, run_demo

    options = DemoOptions(
        urls=urls,
        capacity=capacity,
        slot_seconds=slot_seconds,
        slots=slots,
        scheduler=scheduler,
        database=database,
        seed=seed,
    )
    err_console.print(LIMIT_MEANING, soft_wrap=False, highlight=False)
    screen = Console(stderr=True)  # the live view: wrapped at the width, unlike messages
    with Live(_view(DemoProgress(), options), console=screen, refresh_per_second=4) as live:
        try:
            final = asyncio.run(run_demo(options, lambda p: live.update(_view(p, options))))
        except ValueError as exc:
            fail(str(exc))
    if not screen.is_terminal:  # on a pipe Live prints its last view without a line end
        screen.line()
    err_console.print(
        f"done: {final.hits} changes caught in {final.polls} polls over {final.slot} slots; "
        f"last {options.window} slots at {final.ratio:.0%} of the analytic limit "
        f"(uniform: {final.uniform / final.limit:.0%}).",
        soft_wrap=False,
    )

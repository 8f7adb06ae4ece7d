"""How the service's processes (the service itself, the crawl workers) run Python's garbage
collector: one policy, in one place.

Every poll makes hundreds of short-lived objects (aiohttp's request and response, the
coroutines): with the default thresholds (700, 10, 10) the cyclic collector ran every few
dozen polls, and a full collection walked everything loaded (tens of ms, stalling the crawl
loop). ``tune_gc`` moves what start-up loaded (modules, the scheduler's arrays, the settings)
to the permanent generation and collects the young generation every 20,000 allocations.
"""

from __future__ import annotations

import gc

#: gc.set_threshold values once tuned
THRESHOLDS = (20_000, 20, 20)


def tune_gc(*, collect: bool = True) -> None:
    """Freeze what is loaded now and raise the collection thresholds (``collect``: collect
    first, so no garbage of the start-up is frozen with it)."""
    if collect:
        gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)

"""Sitemaps and feeds a source's crawl reads: hostile input, read off the event loop.

A listing body is hashed, then read in the listing worker process (``crawler.listings``:
streamed, capped, with a deadline; a slot waits a quarter of its length for it, then the read
goes on in the background and its links reach the crawl at its next turn). The same body is
never parsed twice, and a listing is asked for again at most as often as it changes
(``crawler.discovery.ListingPacer``: 1 slot after a change, doubling while unchanged or
failing); a failing or looping listing is warned about once, then logged at DEBUG. Before, a
49 MB sitemap was parsed on the event loop every slot (1 s slots lasted 6-9 s); measured
through the service now, the other hosts keep their polls (docs/discovery.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time

from crawler.discovery import SitemapError
from crawler.service._discovery_base import DiscoveryState
from crawler.service._discovery_parts import (
    LISTING_GRACE,
    MAX_FRESH_LISTINGS,
    MAX_WARNED,
    TRANSIENT_LISTING_FAILURES,
    SlotWork,
)

log = logging.getLogger("crawler.service")


class ListingReads(DiscoveryState):
    """Discovery's reads of sitemaps and feeds, in the listing worker."""

    async def _read_listing(self, slot: SlotWork, url: str, body: bytes, base: str) -> None:
        """A sitemap or feed: its body hashed first and read (in the listing worker, in the
        background: no slot waits for it) only when the hash differs from the last read's.
        Until the read is done the crawl keeps the links it read last time; a listing that
        failed with these very bytes fails again without being read."""
        digest = hashlib.blake2b(body, digest_size=16).digest()
        if self.relisting.same_body(url, digest):
            reason = self.relisting.failing(url)
            if reason is None:
                slot.unchanged.add(url)  # the crawl replays the links it read last time
                self.relisting.unchanged(url, self._slot_no)
            else:
                slot.listings[url] = SitemapError(reason, "the same body as last time")
                self._listing_failed(url, reason, known=True, digest=digest)
            return
        task = self._reading.get(url)
        if task is None:
            task = asyncio.create_task(self._read_off_loop(url, body, base, digest))
            self._reading[url] = task
        # an ordinary listing is read in milliseconds: waited for a little (then used in this
        # slot); a long read goes on in the background, and the slot does not wait for it
        grace = min(LISTING_GRACE * self.settings.slot_seconds, slot.deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), max(0.0, grace))
        if (read := self._fresh.pop(url, None)) is not None:
            slot.listings[url] = read
        else:
            slot.unchanged.add(url)  # being read: the links read last time stand meanwhile

    async def _read_off_loop(self, url: str, body: bytes, base: str, digest: bytes) -> None:
        """Read a listing in the worker; its result waits in ``_fresh`` for its crawl."""
        try:
            read = await self.listings.read(body, base)
        except Exception as exc:  # never the service's end: a failed read of this listing
            log.exception("listing %s not read", url)
            read = SitemapError("worker_lost", repr(exc))
        finally:
            self._reading.pop(url, None)
        self._fresh[url] = read
        self._fresh.move_to_end(url)
        while len(self._fresh) > MAX_FRESH_LISTINGS:
            self._fresh.popitem(last=False)
        if isinstance(read, SitemapError):
            kept = None if read.reason in TRANSIENT_LISTING_FAILURES else digest
            self._listing_failed(url, f"{read.reason} {read.detail}".strip(), True, kept)
        else:
            self.relisting.changed(url, self._slot_no, digest)
            if read.too_large:
                self._warn_once(
                    "too_large",
                    url,
                    f"discovery: sitemap {url} is larger than discovery_listing_max_bytes="
                    f"{self.settings.discovery_listing_max_bytes}: only its first "
                    f"{len(read.items)} entries were read (raise the setting to read more)",
                )

    def _warn_once(self, what: str, url: str, message: str) -> None:
        """A WARNING the first time ``what`` happens to ``url``, DEBUG afterwards."""
        key = (what, url)
        if len(self._warned) >= MAX_WARNED:
            self._warned.clear()
        log.log(logging.DEBUG if key in self._warned else logging.WARNING, "%s", message)
        self._warned.add(key)

    def _listing_failed(
        self, url: str, reason: str, known: bool, digest: bytes | None = None
    ) -> None:
        """A read failed: read again at doubling intervals; a listing (``known``) or a
        source's own page is warned about at the first failure of a run, then at DEBUG."""
        first = self.relisting.failed(url, self._slot_no, reason, digest)
        watched = known or any(s.row.url == url for s in self.sources.values())
        level = logging.WARNING if first and watched else logging.DEBUG
        log.log(
            level,
            "discovery: %s could not be read (%s); read again in %d slots",
            url,
            reason,
            self.relisting.interval(url),
        )

    def _is_listing(self, url: str, slot: SlotWork) -> bool:
        if url in slot.listings or url in self._reading or url in self._fresh:
            return True
        return url in slot.unchanged and url in self.relisting

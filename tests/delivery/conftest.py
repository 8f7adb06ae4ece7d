"""The delivery tests' receivers as fixtures (``_receivers.py`` has the servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.delivery._receivers import JsonReceiver, Received, Receiver, running

__all__ = ["JsonReceiver", "Received", "Receiver", "running"]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running(Receiver()) as r:
        yield r


@pytest.fixture
async def json_receiver() -> AsyncIterator[JsonReceiver]:
    async with running(JsonReceiver()) as r:
        yield r

"""The running service's effective settings, recorded where the admin commands read them.

``crawler list``, ``show`` and ``sources list`` run in other processes than ``crawler run``,
often with other environment variables: converting a bound with their own ``slot_seconds``
(10 s by default) while the service ran 1 s slots showed wrong figures. So ``crawler run``
writes the settings that shape what the commands show (slot length, capacity, scheduler,
default bounds, discovery's share...) as one JSON document in the ``meta`` table at every
start, and the admin commands read it back: one row, no migration (``meta`` is the store's
key/value table). A database no service has run on has no record; the commands then use
their own settings and say so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, select

from crawler.store._engine import translate_errors
from crawler.store._upsert import upsert
from crawler.store.models import meta as _meta

#: the ``meta`` key of the record
SERVICE_SETTINGS = "service_settings"


def save_service_settings(engine: Engine, document: Mapping[str, Any]) -> None:
    """Record the running service's settings (replacing the last service's)."""
    text = json.dumps(dict(document), sort_keys=True, default=str)
    with translate_errors("recording the service's settings"), engine.begin() as conn:
        upsert(
            conn, _meta, [{"key": SERVICE_SETTINGS, "text_value": text}], ["key"], ["text_value"]
        )


def service_settings(engine: Engine) -> dict[str, Any] | None:
    """The settings the last service started on this database recorded (None: none did)."""
    with translate_errors("reading the service's settings"), engine.connect() as conn:
        text = conn.execute(
            select(_meta.c.text_value).where(_meta.c.key == SERVICE_SETTINGS)
        ).scalar()
    if not text:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None

"""The outbox's rows as the store hands them out (``_outbox.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"


@dataclass(frozen=True, slots=True)
class DestinationSpec:
    """What an operator asks of a destination (already validated)."""

    url: str
    secret: str
    tags: tuple[str, ...] = ()
    event_types: tuple[str, ...] = ()
    url_pattern: str | None = None
    #: an apprise destination's body format (None: a Standard Webhooks destination)
    body_format: str | None = None
    #: an apprise destination's body template (None: the format's default)
    template: str | None = None


@dataclass(frozen=True, slots=True)
class DestinationRow:
    id: int
    spec: DestinationSpec
    created_at: datetime
    disabled_at: datetime | None
    disabled_reason: str | None
    paused_until: datetime | None

    def as_json(self, *, with_secret: bool = False) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.spec.url,
            "secret": self.spec.secret if with_secret else None,
            "tags": list(self.spec.tags),
            "events": list(self.spec.event_types),
            "url_pattern": self.spec.url_pattern,
            "format": self.spec.body_format,
            "template": self.spec.template,
            "created_at": self.created_at.isoformat(),
            "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None,
            "disabled_reason": self.disabled_reason,
        }


@dataclass(frozen=True, slots=True)
class EventRow:
    """An event with what filters and payloads need: its URL and that URL's tags."""

    id: int
    type: str
    url_id: int | None
    slot: int | None
    created_at: datetime
    payload: dict[str, Any]
    url: str | None
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A claimed delivery: the event and the destination's address and secret."""

    event: EventRow
    destination_id: int
    destination_url: str
    secret: str
    attempts: int
    #: an apprise destination's body format and template (None: a webhook)
    body_format: str | None = None
    template: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """What one attempt did: ``status`` DELIVERED, PENDING (retry at ``next_at``) or DEAD."""

    event_id: int
    destination_id: int
    status: str
    next_at: datetime | None = None
    http_status: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """One (event, destination) for ``crawler events``."""

    event_id: int
    type: str
    url: str | None
    created_at: datetime
    destination_id: int
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        out["id"] = f"msg_{self.event_id}"
        return out

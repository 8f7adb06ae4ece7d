"""Standard Webhooks signatures, by the reference library ``standardwebhooks``.

The library is small, typed (``py.typed``), dependency-free, and its ``Webhook.sign`` is
exactly the specification's ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``: used as is
rather than re-implemented. Secrets are ``whsec_`` + base64 of 24 random bytes (the
specification asks for 24 to 64 bytes).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def check_secret(secret: str) -> str:
    """``secret`` if it is ``whsec_`` + base64 of 24 to 64 bytes, else ValueError."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a webhook secret starts with whsec_ (omit --secret to have one made)")
    try:
        raw = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the webhook secret after whsec_ is not base64") from None
    if not 24 <= len(raw) <= 64:
        raise ValueError(f"the webhook secret is {len(raw)} bytes: use 24 to 64")
    return secret


def signed_headers(
    secret: str, msg_id: str, body: str, now: datetime | None = None
) -> dict[str, str]:
    """The ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers."""
    when = (now or datetime.now(UTC)).astimezone(UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, when, body),
        "content-type": "application/json",
    }

"""Signing secrets and Standard Webhooks signatures, as both verifiers expect them.

A secret is ``whsec_<base64 of 32 random bytes>``. The official SDK and the
``standardwebhooks`` package decode a secret *without* the prefix differently (raw bytes
versus base64), but agree on this form, so it is the only one the emulator issues or
accepts. A signature is ``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`` and a
``webhook-signature`` header lists one per active secret, space-separated, which is how a
receiver keeps verifying while a rotated secret's predecessor is still honoured.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable

#: The prefix every signing secret carries.
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
#: The ``user-agent`` of signed deliveries, as the platform's pushes announce themselves.
USER_AGENT = "OpenAI/1.0 (+https://platform.openai.com/docs/webhooks)"
_KEY_BYTES = 32


def new_secret() -> str:
    """A fresh ``whsec_`` secret holding 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_KEY_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret: the base64-decoded part after ``whsec_``.

    Raises:
        ValueError: The secret lacks the prefix or its rest is not strict base64 of at
            least one byte; such a secret would verify differently in the two verifiers.
    """
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret must start with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a signing secret must be 'whsec_' followed by base64") from None
    if not key:
        raise ValueError("a signing secret must hold at least one byte")
    return key


def secret_hint(secret: str) -> str:
    """A masked form of a secret for endpoint objects, which never carry the secret itself."""
    return f"{SECRET_PREFIX}...{secret[-4:]}"


def _text(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def sign(secret: str, webhook_id: str, timestamp: int | str, body: bytes | str) -> str:
    """One ``v1,<base64>`` signature of a delivery, as a receiver recomputes it."""
    signed = b".".join((_text(webhook_id), _text(str(timestamp)), _text(body)))
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(
    secrets_: Iterable[str], webhook_id: str, timestamp: int | str, body: bytes | str
) -> str:
    """The ``webhook-signature`` value: one signature per secret, space-separated."""
    return " ".join(sign(s, webhook_id, timestamp, body) for s in secrets_)


def delivery_headers(
    webhook_id: str, body: bytes, secrets_: Iterable[str], timestamp: int | None = None
) -> dict[str, str]:
    """The headers of one signed attempt; the timestamp is the send time unless given."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": stamp,
        "webhook-signature": signature_header(secrets_, webhook_id, stamp, body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }

"""Verifying a delivery's Standard Webhooks signature, with the official SDK's verifier.

The secret is ``OPENAI_WEBHOOK_SECRET`` (the SDK's own variable); a comma-separated list
accepts the old and the new secret while a secret is rotated. A delivery passes when any
secret verifies any of its signatures, and its timestamp is within 300 s of now. Nothing
of the body is read before: a forged delivery costs one HMAC per secret, and its body is
never parsed, logged or kept.

What the headers alone decide (:func:`check_headers`: a secret set, the three headers there,
the timestamp a number within the window) is checked before the body is even received, so
a request that could never verify is refused without the intake holding its body.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from collections.abc import Mapping, Sequence
from functools import cache

import openai

#: Seconds a delivery's timestamp may be off, either way.
TOLERANCE = 300
SECRET_VARIABLE = "OPENAI_WEBHOOK_SECRET"  # noqa: S105  # a variable's name, not a secret


class Unverified(Exception):
    """A delivery whose signature or timestamp does not check out (the message says which)."""


def secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The signing secrets the environment names, in order."""
    raw = (os.environ if env is None else env).get(SECRET_VARIABLE, "")
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def unusable(keys: Sequence[str]) -> list[int]:
    """The 1-based positions of the secrets no delivery could verify against.

    A ``whsec_`` secret is base64 after its prefix, and the verifier decodes it for each
    delivery: one cut short fails every delivery with a decoding error, and one with
    other characters (or nothing) after the prefix decodes to a key no signature
    matches. Either way the platform, refused each time, retries and gives up; so a
    start checks them first.
    """
    bad = []
    for at, key in enumerate(keys, 1):
        if key.startswith("whsec_"):
            try:
                decoded = base64.b64decode(key[len("whsec_") :], validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            if not decoded:
                bad.append(at)
    return bad


@cache
def _verifier() -> openai.OpenAI:
    """An SDK client used only for its verifier (it makes no request)."""
    return openai.OpenAI(api_key="unused-by-the-verifier", webhook_secret=None)


def warm_verifier() -> None:
    """Import the SDK's verifier now: the first delivery spent ~0.1 s on it otherwise."""
    _ = _verifier().webhooks


#: The headers a delivery is signed with.
SIGNED_WITH = ("webhook-id", "webhook-timestamp", "webhook-signature")


def check_headers(headers: Mapping[str, str], keys: Sequence[str]) -> dict[str, str]:
    """The signature's headers, unless they alone show the delivery cannot verify.

    The same checks as the SDK's verifier makes before it computes a signature (the
    timestamp read with ``int`` and compared with the same window), so nothing it would
    pass is refused here.

    Raises:
        Unverified: no secret is set, a header is missing, or the timestamp is not a
            number or is more than :data:`TOLERANCE` seconds off.
    """
    if not keys:
        raise Unverified(f"{SECRET_VARIABLE} is not set, so no delivery can be verified")
    present = {k.lower(): v for k, v in headers.items() if k.lower() in SIGNED_WITH}
    missing = [name for name in SIGNED_WITH if not present.get(name)]
    if missing:
        raise Unverified(f"missing header {', '.join(missing)}")
    try:
        stamp = int(present["webhook-timestamp"])
    except ValueError:
        raise Unverified("Invalid webhook timestamp format") from None
    now = int(time.time())
    if now - stamp > TOLERANCE:
        raise Unverified("Webhook timestamp is too old")
    if stamp > now + TOLERANCE:
        raise Unverified("Webhook timestamp is too new")
    return present


def verify(body: bytes, headers: Mapping[str, str], keys: Sequence[str]) -> None:
    """Pass if a secret verifies the delivery.

    Raises:
        Unverified: no secret is set, a header is missing, the timestamp is off, or no
            signature matches.
    """
    verify_checked(body, check_headers(headers, keys), keys)


def verify_checked(body: bytes, present: Mapping[str, str], keys: Sequence[str]) -> None:
    """Pass if a secret verifies the delivery whose headers :func:`check_headers` returned.

    Raises:
        Unverified: no signature matches (or the timestamp went out of the window since).
    """
    last: Exception | None = None
    for key in keys:
        try:
            _verifier().webhooks.verify_signature(body, present, secret=key, tolerance=TOLERANCE)
            return
        except Exception as exc:  # the SDK raises its own, ValueError, binascii, Unicode...
            last = exc
    raise Unverified(_reason(last))


def _reason(exc: Exception | None) -> str:
    text = str(exc) if exc is not None else "no signature matches"
    if isinstance(exc, openai.InvalidWebhookSignatureError):
        return text
    return f"unreadable signature headers ({type(exc).__name__})"

"""Registered webhook endpoints: the objects the API shows and the secrets they sign with.

No locking here; :class:`emulator.webhooks.state.WebhookState` locks. An endpoint keeps
its previous secret after a rotation that asks for it, for 24 hours, and signs with both
meanwhile: that is how a receiver can switch secrets without losing a delivery.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from emulator.webhooks.params import EndpointChange, ListQuery
from emulator.webhooks.signing import new_secret, secret_hint, secret_key
from emulator.wire import JSON, WireError, new_id

#: How long a rotated-out secret keeps signing when asked to stay active.
OLD_SECRET_GRACE = 24 * 3600.0


@dataclass
class Endpoint:
    """One ``webhook_endpoint``.

    Attributes:
        id: ``we_...``.
        url: Where deliveries go.
        name: The human-readable name.
        event_types: The types it receives.
        secret: The current signing secret.
        created_at: Unix seconds.
        updated_at: Unix seconds of the last change of its configuration or secret.
        old_secret: The previous secret while it stays active, else ``None``.
        old_secret_until: Unix time the previous secret stops signing.
    """

    id: str
    url: str
    name: str
    event_types: tuple[str, ...]
    secret: str
    created_at: int = field(default_factory=lambda: int(time.time()))
    updated_at: int = 0
    old_secret: str | None = None
    old_secret_until: float = 0.0

    def __post_init__(self) -> None:
        self.updated_at = self.updated_at or self.created_at

    def secrets(self, now: float) -> list[str]:
        """The secrets a delivery is signed with now: the current one, then the old one."""
        if self.old_secret is not None and now < self.old_secret_until:
            return [self.secret, self.old_secret]
        return [self.secret]

    def subscribes(self, event_type: str) -> bool:
        """Whether events of ``event_type`` go to this endpoint."""
        return event_type in self.event_types

    def to_json(self, *, with_secret: bool = False) -> JSON:
        """The endpoint object; ``signing_secret`` only for create and rotate answers."""
        data: JSON = {
            "id": self.id,
            "object": "webhook_endpoint",
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "event_types": list(self.event_types),
            "name": self.name,
            "url": self.url,
            "signing_secret_hint": secret_hint(self.secret),
        }
        if with_secret:
            data["signing_secret"] = self.secret
        return data


def _not_found(endpoint_id: str) -> WireError:
    return WireError(
        404,
        f"No webhook endpoint found with id '{endpoint_id}'.",
        code="not_found",
        param="webhook_endpoint_id",
    )


class EndpointStore:
    """The endpoints of one emulator, in creation order."""

    def __init__(self) -> None:
        self._endpoints: dict[str, Endpoint] = {}

    def clear(self) -> None:
        """Forget every endpoint."""
        self._endpoints.clear()

    def create(self, change: EndpointChange, secret: str | None = None) -> Endpoint:
        """Add an endpoint (``secret``: a chosen ``whsec_`` secret, else a fresh one)."""
        if secret is not None:
            secret_key(secret)  # refuse a secret the two verifiers would read differently
        endpoint = Endpoint(
            id=new_id("we"),
            url=change.url or "",
            name=change.name or "",
            event_types=change.event_types or (),
            secret=secret or new_secret(),
        )
        self._endpoints[endpoint.id] = endpoint
        return endpoint

    def get(self, endpoint_id: str) -> Endpoint:
        """The endpoint; 404 ``WireError`` when unknown."""
        endpoint = self._endpoints.get(endpoint_id)
        if endpoint is None:
            raise _not_found(endpoint_id)
        return endpoint

    def find(self, endpoint_id: str) -> Endpoint | None:
        """The endpoint, or ``None`` when unknown (deleted since an event was queued)."""
        return self._endpoints.get(endpoint_id)

    def all(self) -> list[Endpoint]:
        """Every endpoint, oldest first."""
        return list(self._endpoints.values())

    def page(self, query: ListQuery) -> JSON:
        """One cursor page, newest first, as the SDK's ``SyncCursorPage`` reads it."""
        newest = self.all()[::-1]
        start = 0
        if query.after is not None:
            ids = [e.id for e in newest]
            if query.after not in ids:
                raise WireError(
                    400,
                    f"Invalid 'after': no webhook endpoint with id '{query.after}'.",
                    code="invalid_value",
                    param="after",
                )
            start = ids.index(query.after) + 1
        chosen = newest[start : start + query.limit]
        return {
            "object": "list",
            "data": [e.to_json() for e in chosen],
            "first_id": chosen[0].id if chosen else None,
            "last_id": chosen[-1].id if chosen else None,
            "has_more": start + query.limit < len(newest),
        }

    def update(self, endpoint_id: str, change: EndpointChange) -> Endpoint:
        """Apply a change; ``updated_at`` advances only if something actually changed."""
        endpoint = self.get(endpoint_id)
        before = (endpoint.url, endpoint.name, endpoint.event_types)
        endpoint.url = change.url if change.url is not None else endpoint.url
        endpoint.name = change.name if change.name is not None else endpoint.name
        if change.event_types is not None:
            endpoint.event_types = change.event_types
        if (endpoint.url, endpoint.name, endpoint.event_types) != before:
            endpoint.updated_at = int(time.time())
        return endpoint

    def delete(self, endpoint_id: str) -> None:
        """Remove an endpoint; 404 when unknown. Its queued deliveries are abandoned."""
        self.get(endpoint_id)
        del self._endpoints[endpoint_id]

    def rotate(self, endpoint_id: str, keep_old: bool) -> Endpoint:
        """A new secret; the old one keeps signing for 24 hours if ``keep_old``."""
        endpoint = self.get(endpoint_id)
        now = time.time()
        endpoint.old_secret = endpoint.secret if keep_old else None
        endpoint.old_secret_until = now + OLD_SECRET_GRACE if keep_old else 0.0
        endpoint.secret = new_secret()
        endpoint.updated_at = int(now)
        return endpoint

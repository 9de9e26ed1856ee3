"""One delivery of one event to one endpoint, and what a single attempt of it does.

A delivery is immutable: a retry is the same delivery with the next attempt number, so
every attempt sends the same body under the same ``webhook-id``. Only the timestamp and
the signatures are made at send time, as a real sender's are: a retry hours later carries
a fresh timestamp (else every receiver's replay window would refuse it) and is signed with
the secrets active then.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import httpx

from emulator.webhooks.events import Event
from emulator.webhooks.faults import WebhookFaults
from emulator.webhooks.sender import Attempted, not_sent, post
from emulator.webhooks.signing import delivery_headers

LOST = "lost (fail_first fault): not sent"


@dataclass(frozen=True)
class Delivery:
    """The job the dispatcher runs: one attempt of delivering ``event`` to an endpoint.

    Attributes:
        event: The event (its body and ``webhook-id`` are fixed).
        endpoint_id: The endpoint; its URL and secrets are read at each attempt.
        source: Where the event came from (see ``emulator.webhooks.records.SOURCES``).
        duplicate: This is the ``duplicate`` fault's second copy.
        attempt: The attempt this job makes, from 1.
        generation: The state's generation when queued; a reset makes it stale.
    """

    event: Event
    endpoint_id: str
    source: str
    duplicate: bool = False
    attempt: int = 1
    generation: int = 0

    def retry(self) -> Delivery:
        """The next attempt of the same delivery."""
        return dataclasses.replace(self, attempt=self.attempt + 1)


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt did.

    Attributes:
        attempted: The HTTP result (or the fault that kept it from being sent).
        outcome: ``delivered``, ``failed`` or ``lost``.
        final: No retry follows.
        signatures: Signatures the attempt carried (0 when not sent).
    """

    attempted: Attempted
    outcome: str
    final: bool
    signatures: int


def attempt(
    delivery: Delivery,
    url: str,
    secrets: list[str],
    faults: WebhookFaults,
    client: httpx.Client,
) -> AttemptResult:
    """Make one attempt: lost to ``fail_first``, or signed now and POSTed."""
    if delivery.attempt <= faults.fail_first:
        attempted, outcome, signatures = not_sent(LOST), "lost", 0
    else:
        event = delivery.event
        headers = delivery_headers(event.webhook_id, event.body, secrets)
        attempted = post(client, url, event.body, headers, faults.timeout)
        outcome = "delivered" if attempted.ok else "failed"
        signatures = len(secrets)
    final = attempted.ok or delivery.attempt >= faults.max_attempts
    return AttemptResult(attempted, outcome, final, signatures)

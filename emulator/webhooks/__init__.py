"""Webhooks: the ``/v1/webhook_endpoints`` API and signed pushes of session events.

The platform can push ``agent.session.action_required`` to an application instead of being
polled. Here endpoints are registered through the API (``emulator.webhooks.routes``, the
SDK's ``client.webhooks``) or the admin routes (``emulator.webhooks.admin``); whenever a
session starts waiting on actions, ``EmulatorState`` calls the hook of
:class:`~emulator.webhooks.state.WebhookState`, which signs the event the Standard Webhooks
way (``emulator.webhooks.signing``) and delivers it off the request path
(``emulator.webhooks.dispatcher``), at least once, retrying with backoff, shaped by fault
knobs (``emulator.webhooks.faults``) that make duplicates, reordering, loss and stale
events reproducible. ``emulator.webhooks.testing`` has a receiver for tests.
"""

from __future__ import annotations

from emulator.webhooks.faults import WebhookFaults
from emulator.webhooks.records import DeliveryRecord, EventRecord
from emulator.webhooks.signing import sign
from emulator.webhooks.state import WebhookState

__all__ = ["DeliveryRecord", "EventRecord", "WebhookFaults", "WebhookState", "sign"]

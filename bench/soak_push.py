"""The soak's pushes: every session that starts waiting is also pushed to ``toolfan webhook``.

The emulator signs and delivers an event for each session that starts waiting to one
intake that lives the whole run (judged on memory like the other long-lived processes),
with the push channel's own faults on: events dropped (the pollers must find those
sessions), delivered twice, shuffled, and stale events for sessions no longer waiting. The
judged poller still polls at the bench's 0.2 s, so pushes race polls for every session;
the sessions' exactly-once verdict covers both paths. An attempt the intake refused, or
did not answer in time, counts against the push verdict: the intake lives throughout, so
each is toolfan's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.emu import JSON, Emulator
from bench.stack import WEBHOOK_SECRET, BenchStack
from dispatcher.devstack import Service, free_port

#: The push channel's misbehaviour throughout the run (see ``emulator.webhooks.faults``).
PUSH_FAULTS: JSON = {"duplicate": 0.02, "drop": 0.02, "stale": 0.02, "reorder": 200.0}
#: The quick run's: higher, so that a few hundred events see each kind.
QUICK_PUSH_FAULTS: JSON = {**PUSH_FAULTS, "duplicate": 0.1, "drop": 0.1, "stale": 0.1}


class Intake:
    """``toolfan webhook`` on a free port, with the bench's signing secret."""

    def __init__(self, stack: BenchStack) -> None:
        port = free_port()
        env = {**stack.env, "OPENAI_WEBHOOK_SECRET": WEBHOOK_SECRET}
        argv = ["webhook", "--port", str(port)]
        self.service = stack.track(Service(argv, stack.workdir / "webhook.log", env), "intake")
        self.service.wait_for_output("listening", 60)
        self.url = f"http://127.0.0.1:{port}/webhooks/openai"

    @property
    def pid(self) -> int:
        """The intake's process id."""
        return self.service.proc.pid

    def register(self, emu: Emulator, faults: JSON, seed: int) -> None:
        """Have the emulator push to the intake with ``faults`` (again after every reset)."""
        emu.register_webhook(self.url, WEBHOOK_SECRET)
        emu.http.put("/webhooks/faults", json={**faults, "seed": seed}).raise_for_status()

    def stop(self) -> None:
        """Stop the intake."""
        self.service.stop()


@dataclass
class PushTally:
    """The pushes of every epoch: events, attempts by outcome, and the refused ones."""

    events: int = 0
    dropped: int = 0
    duplicated: int = 0
    attempts: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)

    def add(self, emu: Emulator) -> None:
        """Count the epoch's events and delivery attempts (before the emulator forgets them)."""
        events = emu.http.get("/webhooks/events").raise_for_status().json()["data"]
        self.events += len(events)
        self.dropped += sum(1 for e in events if e["dropped"])
        self.duplicated += sum(1 for e in events if e["duplicated"])
        for attempt in emu.deliveries():
            self.attempts[str(attempt["outcome"])] += 1
            self.statuses[str(attempt["status"])] += 1

    @property
    def refused(self) -> int:
        """Attempts sent to the intake that it did not accept (a status other than 2xx)."""
        return self.attempts["failed"]

    def to_json(self) -> dict[str, Any]:
        """The counts, for the soak's document."""
        return {
            "events": self.events,
            "dropped": self.dropped,
            "duplicated": self.duplicated,
            "attempts": dict(self.attempts),
            "statuses": dict(self.statuses),
            "refused": self.refused,
        }

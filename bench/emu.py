"""The emulator's admin routes, as the bench uses them: seed, wait for batches, count requests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from bench.config import Workload
from bench.measure import percentiles

JSON = dict[str, Any]
LIST_PATH = "/v1/agents/sessions"
#: Sessions per bulk request: large enough to be quick, small enough to stay one read.
SEED_CHUNK = 2_000


@dataclass(frozen=True)
class Seeded:
    """Sessions created by one bulk request, and the server time they became pending."""

    ids: list[str]
    at: float


def session_body(workload: Workload) -> JSON:
    """One session waiting for the workload's K calls (explicit ids keep the JSON small)."""
    calls = [
        {
            "name": workload.tool,
            "arguments": workload.arguments,
            "turn_id": "t1",
            "call_id": f"c{i}",
        }
        for i in range(workload.calls)
    ]
    return {"function_calls": calls}


class Emulator:
    """An admin client of the bench's emulator.

    Args:
        origin: ``http://host:port`` of the emulator.
    """

    def __init__(self, origin: str) -> None:
        self.http = httpx.Client(base_url=f"{origin}/_emulator", timeout=60)
        #: Seconds the stand-in adds before every answer of its API, kept across resets.
        self.latency = 0.0

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def reset(self) -> None:
        """Forget sessions, batches and the request log: every phase starts empty.

        The stand-in's faults are reset too, but for :attr:`latency`, set again.
        """
        self.http.post("/reset").raise_for_status()
        if self.latency:
            self.http.put("/faults", json={"latency": self.latency}).raise_for_status()

    def seed(self, bodies: Sequence[JSON]) -> list[Seeded]:
        """Create sessions in bulk requests of :data:`SEED_CHUNK`."""
        seeded = []
        for start in range(0, len(bodies), SEED_CHUNK):
            chunk = list(bodies[start : start + SEED_CHUNK])
            answer = self.http.post("/sessions/bulk", json={"sessions": chunk})
            data = answer.raise_for_status().json()
            seeded.append(Seeded(data["data"], float(data["at"])))
        return seeded

    def batches(self, offset: int = 0) -> list[JSON]:
        """Accepted batches from ``offset`` on, in acceptance order."""
        answer = self.http.get("/batches", params={"offset": offset})
        data: list[JSON] = answer.raise_for_status().json()["data"]
        return data

    def wait_batches(self, expected: int, timeout: float, every: float = 0.25) -> list[JSON]:
        """Every batch, once ``expected`` sessions have one (reading only new batches).

        Raises:
            TimeoutError: with how many arrived, when ``timeout`` passes first.
        """
        deadline = time.monotonic() + timeout
        batches: list[JSON] = []
        while True:
            batches += self.batches(len(batches))
            if len({b["session_id"] for b in batches}) >= expected:
                return batches
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(batches)} batches after {timeout:.0f} s; expected {expected} sessions"
                )
            time.sleep(every)

    def register_webhook(self, url: str, secret: str) -> None:
        """Have every session that starts waiting pushed to ``url``, signed with ``secret``."""
        body = {"url": url, "signing_secret": secret}
        self.http.post("/webhooks/endpoints", json=body).raise_for_status()

    def deliveries(self) -> list[JSON]:
        """Every webhook delivery attempt so far, oldest first."""
        data: list[JSON] = self.http.get("/webhooks/deliveries").raise_for_status().json()["data"]
        return data

    def retrieved_times(self) -> dict[str, float]:
        """Session id -> when the API first received the retrieve of that one session."""
        params = {"path": f"{LIST_PATH}/", "method": "GET"}
        data = self.http.get("/requests", params=params).raise_for_status().json()["data"]
        first: dict[str, float] = {}
        for record in data:
            sid = record["path"].removeprefix(f"{LIST_PATH}/")
            if sid and "/" not in sid:
                first.setdefault(sid, float(record["at"]))
        return first

    def first_request(self, since: float) -> float | None:
        """When the API first saw a request (any ``/v1`` path) at or after ``since``."""
        data = self.http.get("/requests", params={"path": "/v1/"}).raise_for_status().json()
        times = [float(r["at"]) for r in data["data"] if float(r["at"]) >= since]
        return min(times) if times else None

    def list_requests(self, since: float = 0.0) -> int:
        """``GET /v1/agents/sessions`` requests received at or after ``since``."""
        params = {"path": LIST_PATH, "method": "GET"}
        data = self.http.get("/requests", params=params).raise_for_status().json()["data"]
        return sum(1 for r in data if r["path"] == LIST_PATH and r["at"] >= since)


def answer_times(
    emu: Emulator, seeded: Sequence[Seeded], batches: Sequence[JSON]
) -> tuple[float, float, dict[str, float]]:
    """When the clock started, the seconds a throughput counts over, and the latencies.

    The clock starts at the first request the API saw after seeding, as a user's clock
    would, and stops at the last accepted batch; each latency counts from the moment its
    session became pending.
    """
    seeded_at = min(s.at for s in seeded)
    start = emu.first_request(seeded_at) or seeded_at
    end = max(b["received_at"] for b in batches)
    return start, end - start, percentiles(latencies(batches, pending_times(seeded)))


def latencies(batches: Sequence[JSON], pending_at: dict[str, float]) -> list[float]:
    """Seconds from each session becoming pending to its batch being accepted."""
    return [b["received_at"] - pending_at[b["session_id"]] for b in batches]


def pushed_times(deliveries: Sequence[JSON]) -> dict[str, float]:
    """Session id -> when its push was delivered (the answered attempt's start)."""
    pushed: dict[str, float] = {}
    for delivery in deliveries:
        sid, status = delivery.get("session_id"), delivery.get("status")
        if sid and isinstance(status, int) and 200 <= status < 300 and delivery.get("sent_at"):
            pushed.setdefault(sid, float(delivery["sent_at"]))
    return pushed


def pending_times(seeded: Sequence[Seeded]) -> dict[str, float]:
    """Session id -> the server time it became pending."""
    return {sid: s.at for s in seeded for sid in s.ids}

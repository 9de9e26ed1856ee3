"""Deadlines on the intake's connections: a request arrives whole in time, or it is closed.

uvicorn bounds how long a connection may idle *between* requests (``timeout_keep_alive``)
and nothing else: the first byte a connection receives clears that timer, and a connection
that has just opened has none. So a single client could hold any number of the intake's
connections, each a file descriptor and a task, by opening them and sending nothing, or a
byte now and then (the attack called slowloris). The intake is the one endpoint of toolfan
that anyone can reach, and what it serves arrives whole in milliseconds: the platform's
deliveries, an application's watch, a person's form.

:class:`IntakeProtocol` is uvicorn's HTTP/1.1 protocol with two timers more:

- a connection that has just opened gets the keep-alive time (75 s) for its first byte,
  as an idle kept-alive connection does;
- from the first byte of a request, the request has :data:`RECEIPT_SECONDS` to arrive
  whole, head and body. The timer ends once it has, so a slow answer is never cut.

A connection past either deadline is closed without an answer, counted in
``toolfan_webhook_connections_closed_total{reason}`` and logged, at most one line a
:data:`LOG_EVERY` seconds (the client decides how many there are).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from dispatcher.webhook.metrics import CLOSED
from dispatcher.webhook.throttle import LOG_EVERY, Throttle

log = logging.getLogger("toolfan.webhook")

#: Seconds a request may take to arrive whole, from its first byte: a delivery of the
#: largest body the intake reads (``TOOLFAN_WEBHOOK_MAX_BYTES``, 1 MiB) at 35 KB/s.
RECEIPT_SECONDS = 30.0

#: Why a connection was closed: nothing sent since it opened; a request too slow to arrive.
SILENT, SLOW = "silent", "slow"


class IntakeProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request's arrival (see the module).

    The arrival deadline runs exactly while the server waits on the client for a request:
    from the first byte of its head until its last byte. Not while the request waits on
    the server (pipelined behind an answer still being made), and not between requests,
    where uvicorn's keep-alive counts.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._reason: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection has the keep-alive time to send its first byte."""
        super().connection_made(transport)
        self._start(self.timeout_keep_alive, SILENT)

    def data_received(self, data: bytes) -> None:
        """Bytes from the client: a request's first starts its deadline, its last ends it."""
        if self._reason == SILENT:
            self._stop()
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        """An answer is out: a request that waited behind it is read now."""
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        """No timer outlives its connection."""
        self._stop()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Start the arrival deadline if the server now waits on the client, else end it."""
        if self._awaits_client():
            if self._reason != SLOW:
                self._start(RECEIPT_SECONDS, SLOW)
        elif self._reason == SLOW:
            self._stop()

    def _awaits_client(self) -> bool:
        """Whether a request has begun to arrive and has not arrived whole yet."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            return True
        return state is h11.IDLE and bool(self.conn.trailing_data[0])  # part of a head

    def _start(self, seconds: float, reason: str) -> None:
        self._stop()
        self._timer = self.loop.call_later(seconds, self._expired, reason)
        self._reason = reason

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._reason = None, None

    def _expired(self, reason: str) -> None:
        self._timer, self._reason = None, None
        if self.transport is None or self.transport.is_closing():
            return
        CLOSED.labels(reason).inc()
        _report(reason, self.client)
        self.transport.close()


def _report(reason: str, client: tuple[str, int] | None) -> None:
    """Log one closed connection, with the count, unless a line is recent."""
    count = _CLOSES.due()
    if count is None:
        return
    what = "sent nothing" if reason == SILENT else "did not send a whole request"
    within = f" within {RECEIPT_SECONDS:g} s" if reason == SLOW else " since it opened"
    peer = f"{client[0]}:{client[1]}" if client else "a client"
    log.warning(
        "closed a connection from %s that %s%s; %d closed unanswered since the last "
        "such line (toolfan_webhook_connections_closed_total counts them all)",
        peer,
        what,
        within,
        count,
    )


#: Connections closed unanswered, for :func:`_report`'s lines.
_CLOSES = Throttle(LOG_EVERY)

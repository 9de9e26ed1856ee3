"""Example tools, loaded by default (``TOOLFAN_HANDLERS=handlers.examples``).

They show the shapes a real tool takes: a lookup that fails with a message for the model,
an enum argument with a default, a pydantic model argument with a cross-field check, a
deferred tool found through tool search, and a non-idempotent tool whose ``reconcile``
hook tells, after a crash, whether the side effect already happened. State lives in a
small SQLite file (``TOOLFAN_EXAMPLES_DB``) so that it survives a killed worker.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from handlers.errors import ToolError
from handlers.registry import tool
from handlers.tool import RUN_AGAIN

_CUSTOMERS = {
    "123": {"id": "123", "name": "Ada Lovelace", "plan": "pro", "email": "ada@example.com"},
    "456": {"id": "456", "name": "Alan Turing", "plan": "free", "email": "alan@example.com"},
    "789": {"id": "789", "name": "Grace Hopper", "plan": "team", "email": "grace@example.com"},
}


@tool(timeout=5)
def get_customer(
    customer_id: Annotated[str, Field(description="The customer's id")],
) -> dict[str, str]:
    """Look up a customer's profile (name, plan, email) by id."""
    customer = _CUSTOMERS.get(customer_id)
    if customer is None:
        known = ", ".join(sorted(_CUSTOMERS))
        raise ToolError(f"No customer with id {customer_id!r}. Known ids: {known}")
    return customer


@tool(timeout=10)
def get_weather(
    city: Annotated[str, Field(description="City name, e.g. 'Paris'", min_length=1)],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict[str, Any]:
    """Get the current weather for a city.

    The figures are synthetic but stable per city, so demos and tests can rely on them.
    """
    digest = hashlib.sha256(city.strip().lower().encode()).digest()
    celsius = digest[0] % 35 - 5
    temperature = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
    sky = ("sunny", "cloudy", "rain", "snow" if celsius < 2 else "wind")[digest[1] % 4]
    return {"city": city, "temperature": temperature, "unit": unit, "sky": sky}


class CalendarEvent(BaseModel):
    """A meeting to put on the calendar."""

    title: str = Field(
        description="Short title shown in the calendar", min_length=1, max_length=200
    )
    start: datetime = Field(
        description="Start time, ISO 8601 with a UTC offset; must be in the future"
    )
    duration_minutes: int = Field(30, description="Length of the meeting", ge=5, le=480)
    attendees: list[str] = Field(default_factory=list, description="Attendee email addresses")

    @field_validator("start")
    @classmethod
    def _in_the_future(cls, start: datetime) -> datetime:
        if start.tzinfo is None:
            raise ValueError("start needs a UTC offset, e.g. 2030-01-01T09:00:00+00:00")
        if start <= datetime.now(UTC):
            raise ValueError("start must be in the future")
        return start


@tool(timeout=10)
def create_calendar_event(event: CalendarEvent) -> dict[str, Any]:
    """Create a calendar event and return its id, start and end."""
    end = event.start + timedelta(minutes=event.duration_minutes)
    key = f"{event.title}|{event.start.isoformat()}"
    event_id = "evt_" + hashlib.sha256(key.encode()).hexdigest()[:12]
    return {"id": event_id, "title": event.title, "start": event.start, "end": end}


@tool(timeout=10, defer_loading=True)
def search_help_center(
    query: Annotated[str, Field(description="What to search for")],
) -> list[dict[str, str]]:
    """Search the help center articles; rarely needed, so loaded only through tool search."""
    articles = [
        {"title": "Changing your plan", "url": "https://help.example.com/plans"},
        {"title": "Refund policy", "url": "https://help.example.com/refunds"},
    ]
    return [a for a in articles if any(w in a["title"].lower() for w in query.lower().split())]


def _refunds() -> sqlite3.Connection:
    default = Path(tempfile.gettempdir()) / "toolfan-examples.sqlite3"
    db = sqlite3.connect(os.environ.get("TOOLFAN_EXAMPLES_DB", str(default)), timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS refunds (order_id TEXT PRIMARY KEY, cents INTEGER)")
    return db


class Refund(BaseModel):
    """A refund of part or all of an order."""

    order_id: str = Field(description="The order to refund", min_length=1)
    amount_cents: int = Field(description="Amount to refund, in cents", gt=0, le=1_000_000)


def _find_refund(args: Refund) -> dict[str, Any] | object:
    """Reconcile hook: a refund already recorded for the order means the call ran."""
    with _refunds() as db:
        row = db.execute(
            "SELECT cents FROM refunds WHERE order_id = ?", (args.order_id,)
        ).fetchone()
    if row is None:
        return RUN_AGAIN
    return {"order_id": args.order_id, "refunded_cents": row[0], "status": "already refunded"}


@tool(timeout=15, idempotent=False, reconcile=_find_refund)
def issue_refund(args: Refund) -> dict[str, Any]:
    """Refund an order. Not idempotent: each run moves money, so it never runs twice blindly."""
    with _refunds() as db:
        if db.execute("SELECT 1 FROM refunds WHERE order_id = ?", (args.order_id,)).fetchone():
            raise ToolError(f"Order {args.order_id} was already refunded")
        db.execute("INSERT INTO refunds VALUES (?, ?)", (args.order_id, args.amount_cents))
    return {"order_id": args.order_id, "refunded_cents": args.amount_cents, "status": "refunded"}

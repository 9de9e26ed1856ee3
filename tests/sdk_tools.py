"""Tools written for the official openai SDK's Agents helpers, as an application has them.

Nothing here knows toolfan but ``sdk_nap``, given a timeout of its own with the public
``toolfan.tool``; a worker with this module in ``TOOLFAN_HANDLERS`` finds the others at
module level. ``sdk_nap``'s ``FunctionTool`` is deliberately not a module attribute, so a
fresh :class:`handlers.Registry` loading this module finds exactly the other three.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from openai.lib.beta.agents import function_tool, pydantic_function_tool
from pydantic import BaseModel, Field

from toolfan import tool


@function_tool
def sdk_weather(
    city: str, unit: Literal["celsius", "fahrenheit"] = "celsius", days: int = 1
) -> dict[str, Any]:
    """Synthetic forecast for a city."""
    if city == "Atlantis":
        raise LookupError("no forecast for Atlantis")
    return {"city": city, "unit": unit, "days": days}


@function_tool
async def sdk_echo(text: str, parts: bool = False, delay: float = 0.0) -> Any:
    """Echo the text (async); as a content list when ``parts`` is true."""
    await asyncio.sleep(delay)
    if parts:
        return [{"type": "input_text", "text": text}]
    return text or None


class Order(BaseModel):
    """Look up an order by its id."""

    order_id: str = Field(description="The order's id", min_length=1)
    verbose: bool = False


class OrderView(BaseModel):
    id: str
    status: str
    verbose: bool


def _lookup(order: Order) -> OrderView | float:
    if order.order_id == "nan":
        return float("nan")  # the SDK's json.dumps refuses it
    return OrderView(id=order.order_id, status="shipped", verbose=order.verbose)


sdk_lookup = pydantic_function_tool(Order, handler=_lookup, name="sdk_lookup")


def _nap(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "awake"


sdk_nap = tool(timeout=0.5)(function_tool(_nap, name="sdk_nap"))

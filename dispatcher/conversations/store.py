"""A conversation's record in Redis: its spec, status, and every saved step.

One hash per conversation (:func:`tasks.keys.conversation`). Each model answer is saved
with ``HSETNX`` under ``answer:<step>`` (the first saved answer wins, as the ledger's first
result does), and each step's tool results under ``results:<step>``. The end is written
once, by a script that moves the status from ``running`` only, and pushes it onto a list
its waiters block on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from dispatcher.conversations.spec import Spec
from dispatcher.waiting import wait_element
from tasks import keys

RUNNING = "running"
COMPLETED = "completed"
MAX_STEPS = "max_steps"
FAILED = "failed"
FINAL = frozenset({COMPLETED, MAX_STEPS, FAILED})

#: Start unless the conversation exists: the spec, the status, the expiry.
START = """
if redis.call('HSETNX', KEYS[1], 'spec', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'running', 'updated_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""

#: End once: only a running conversation ends, and its waiters are woken.
END = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'reason', ARGV[2], 'text', ARGV[3],
           'updated_at', ARGV[5])
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""

#: Take the model lease of a step, or say who holds it.
LEASE = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] and ARGV[3] == '0' then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""


@dataclass(frozen=True)
class Conversation:
    """A conversation as saved."""

    conversation_id: str
    spec: Spec
    status: str
    reason: str
    text: str
    answers: dict[int, dict[str, Any]]
    results: dict[int, dict[str, dict[str, Any]]]
    deadlines: dict[int, float]
    model_calls: dict[int, int]

    @property
    def final(self) -> bool:
        """Whether it ended."""
        return self.status in FINAL

    @property
    def answered_steps(self) -> int:
        """How many model answers are saved, from step 0 on."""
        step = 0
        while step in self.answers:
            step += 1
        return step


class ConversationStore:
    """Reads and writes conversations on one Redis.

    Args:
        client: The ledger's Redis client (``decode_responses=True``).
        ttl: Seconds a conversation is kept after its last write.
    """

    def __init__(self, client: redis.Redis, ttl: int) -> None:
        self.client = client
        self.ttl = ttl
        self._start = client.register_script(START)
        self._end = client.register_script(END)
        self._lease = client.register_script(LEASE)

    def start(self, conversation_id: str, spec: Spec) -> bool:
        """Save a new conversation; False if one of that id exists (it is left as it is)."""
        key = keys.conversation(conversation_id)
        return bool(self._start(keys=[key], args=[spec.to_json(), self.ttl, time.time()]))

    def load(self, conversation_id: str) -> Conversation | None:
        """The conversation, or None if there is none of that id."""
        raw = cast(dict[str, str], self.client.hgetall(keys.conversation(conversation_id)))
        if "spec" not in raw:
            return None
        return _conversation(conversation_id, raw)

    def save_answer(
        self, conversation_id: str, step: int, answer: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Save a step's model answer; the first saved one wins and is returned."""
        key = keys.conversation(conversation_id)
        field = f"answer:{step}"
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(key, field, json.dumps(answer))
        pipe.hget(key, field)
        pipe.expire(key, self.ttl)
        _, saved, _ = pipe.execute()
        return cast(dict[str, Any], json.loads(saved))

    def save_results(
        self, conversation_id: str, step: int, results: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Save a step's tool results (an answer is only ever stored once, so any copy)."""
        key = keys.conversation(conversation_id)
        self.client.hsetnx(key, f"results:{step}", json.dumps(results))

    def set_deadline(self, conversation_id: str, step: int, at: float) -> float:
        """Fix when a step's tool calls run out of time; the first one set stays."""
        key = keys.conversation(conversation_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(key, f"deadline:{step}", repr(at))
        pipe.hget(key, f"deadline:{step}")
        _, saved = pipe.execute()
        return float(saved)

    def count_model_call(self, conversation_id: str, step: int) -> None:
        """Count a model call made for a step (``toolfan inspect`` shows it)."""
        self.client.hincrby(keys.conversation(conversation_id), f"model_calls:{step}", 1)

    def end(self, conversation_id: str, status: str, reason: str = "", text: str = "") -> bool:
        """End a running conversation; False if it had ended already."""
        key, end = keys.conversation(conversation_id), keys.conversation_end(conversation_id)
        args: list[str | int | float] = [status, reason, text, self.ttl, time.time()]
        return bool(self._end(keys=[key, end], args=args))

    def wait_end(self, conversation_id: str, seconds: float) -> str | None:
        """The final status once it ends, or None after ``seconds`` (0: do not wait)."""
        end = keys.conversation_end(conversation_id)
        if seconds > 0:
            return wait_element(self.client, end, seconds)
        value = self.client.lindex(end, 0)
        return str(value) if value is not None else None

    def take_lease(
        self, conversation_id: str, owner: str, ms: int, force: bool = False
    ) -> str | None:
        """Hold the model lease; None when taken, else the owner holding it."""
        args: list[str | int] = [owner, ms, "1" if force else "0"]
        held = self._lease(keys=[keys.conversation_lease(conversation_id)], args=args)
        return str(held) if held else None

    def release_lease(self, conversation_id: str) -> None:
        """Give the model lease up (its answer is saved, or its call failed)."""
        self.client.delete(keys.conversation_lease(conversation_id))


def _conversation(conversation_id: str, raw: dict[str, str]) -> Conversation:
    answers: dict[int, dict[str, Any]] = {}
    results: dict[int, dict[str, dict[str, Any]]] = {}
    deadlines: dict[int, float] = {}
    calls: dict[int, int] = {}
    for name, value in raw.items():
        kind, _, step = name.partition(":")
        if not step.isdigit():
            continue
        if kind == "answer":
            answers[int(step)] = json.loads(value)
        elif kind == "results":
            results[int(step)] = json.loads(value)
        elif kind == "deadline":
            deadlines[int(step)] = float(value)
        elif kind == "model_calls":
            calls[int(step)] = int(value)
    return Conversation(
        conversation_id,
        Spec.from_json(raw["spec"]),
        raw.get("status", RUNNING),
        raw.get("reason", ""),
        raw.get("text", ""),
        answers,
        results,
        deadlines,
        calls,
    )

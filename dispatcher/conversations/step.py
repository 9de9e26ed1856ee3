"""The ``toolfan.model`` task: move a conversation one step on, from what is saved.

Every run of the task reads the conversation and does the one thing that is due, so any
number of copies, redeliveries and repeats converge:

* the last answer asked for tools whose batch is unanswered: dispatch it (the engine's
  claims make a repeat a no-op) and wait: the batch's delivery sends this task again, and
  a copy scheduled for the batch's deadline answers what is still unfinished with errors.
  A long wait is looked at on the way, as a poll pass looks at a session: a copy runs
  every :func:`look_every` seconds and dispatches again a call whose message died with
  its worker (popped, never recorded as taken), instead of answering it with a timeout
  error at the deadline;
* the batch is answered: save its results, then call the model for the next step, unless
  ``max_steps`` answers are saved;
* an answer without tool calls ends the conversation.

A model call is made under a lease naming the worker, so two live copies never call the
model for the same step; a copy whose lease holder died takes it over. The answer is
saved (first one wins) before anything acts on it: a crash after that never calls the
model for that step again.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any

import redis
from celery import Task

from dispatcher.conversations.history import calls_of, history, text_of
from dispatcher.conversations.model import ModelError, call_model
from dispatcher.conversations.store import (
    COMPLETED,
    FAILED,
    MAX_STEPS,
    Conversation,
    ConversationStore,
)
from dispatcher.sources.inline import NAME
from dispatcher.sources.inline_run import InlineBatch, InlineRunner
from handlers.definitions import tool_definitions
from handlers.runner import safe_str
from handlers.text import clip, shown
from tasks import liveness
from tasks.app import app
from tasks.queues import MODEL_TASK
from tasks.runtime import get_ledger, get_settings, load_registry

log = logging.getLogger("toolfan.conversation")

#: Seconds past a batch's deadline at which its watchdog copy of this task runs.
WATCHDOG_SLACK = 0.5


def look_every() -> float:
    """Seconds between the looks at a step's batch in flight for calls lost with a worker.

    A lost call is dispatched again only once its worker's death is older than
    ``TOOLFAN_DEAD_AFTER`` plus two beats (the reaper has had its turn), so looking more
    often would find nothing more; one beat more lets that turn end.
    """
    settings = get_settings()
    return settings.dead_after + 3 * settings.heartbeat


def get_store() -> ConversationStore:
    """The conversations of this process's Redis."""
    ledger = get_ledger(NAME)
    return ConversationStore(ledger.client, ledger.ttl)


def batch_of(conversation: Conversation, step: int) -> InlineBatch:
    """The inline batch of one step's tool calls (named by the conversation and the step)."""
    api = conversation.spec.api
    calls = calls_of(api, conversation.answers[step])
    return InlineBatch.of(api, calls, json.dumps([conversation.conversation_id, step]))


def continuation(conversation_id: str) -> str:
    """What a step's batch sends once it is answered: this task, for the conversation."""
    return json.dumps({"task": MODEL_TASK, "args": [conversation_id]})


class Step:
    """One run of the task for one conversation."""

    def __init__(self, store: ConversationStore, conversation: Conversation, worker: str) -> None:
        self.store = store
        self.conversation = conversation
        self.cid = conversation.conversation_id
        self.worker = worker
        self.ids = f"conversation_id={shown(self.cid)}"

    def advance(self, look: int | None = None) -> str:
        """Do what is due; returns what it did, for the task's result and the logs.

        ``look`` is the step a scheduled look was for: once the conversation has moved
        past that step, the look has nothing to do (the step it waits on has looks of its
        own).
        """
        conv = self.conversation
        step = conv.answered_steps
        if step > 0 and calls_of(conv.spec.api, conv.answers[step - 1]):
            if step - 1 not in conv.results and not self._collect(step - 1, look):
                return "waiting for tools"
        elif step > 0:
            return self._end(COMPLETED, text=text_of(conv.spec.api, conv.answers[step - 1]))
        if step >= conv.spec.max_steps:
            return self._end(MAX_STEPS, f"stopped after {step} model steps")
        answer = self._model_answer(step)
        if answer is None:
            return "model call in progress elsewhere"
        if not calls_of(conv.spec.api, answer):
            return self._end(COMPLETED, text=text_of(conv.spec.api, answer))
        self._dispatch(step)
        return f"step {step} dispatched"

    def _collect(self, step: int, look: int | None = None) -> bool:
        """Save a step's tool results if its batch is answered (or out of time): True then."""
        if step not in self.conversation.deadlines:  # saved, then the step died: go on
            self._dispatch(step)
            return False
        runner = InlineRunner()
        batch = batch_of(self.conversation, step)
        answer = runner.answered(batch)
        deadline = self.conversation.deadlines[step]
        if answer is None and time.time() < deadline:
            if look is not None and look != step:
                return False
            runner.start(batch, then=continuation(self.cid), look=True)
            self._watchdog(step, deadline)
            return False
        if answer is None:
            log.warning("%s step %d: tool calls out of time; answering them", self.ids, step)
            answer = runner.expire(batch, self.conversation.spec.tool_timeout)
        self.store.save_results(self.cid, step, answer)
        self.conversation.results[step] = answer
        return True

    def _model_answer(self, step: int) -> dict[str, Any] | None:
        """The model's answer for ``step``: saved, or called for now under the lease."""
        saved = self.store.load(self.cid)
        if saved is not None and step in saved.answers:
            return saved.answers[step]
        if not self._lease():
            return None
        spec = self.conversation.spec
        tools = tool_definitions(spec.api.value, load_registry()) if len(load_registry()) else []
        self.store.count_model_call(self.cid, step)
        try:
            answer = call_model(
                spec.api, spec.model, history(self.conversation), spec.instructions, tools
            )
        finally:
            self.store.release_lease(self.cid)
        saved_answer = self.store.save_answer(self.cid, step, answer)
        self.conversation.answers[step] = saved_answer
        log.info("%s step %d: model answered", self.ids, step)
        return saved_answer

    def _lease(self) -> bool:
        """Hold the model lease; False while another live worker holds it."""
        ms = int((get_settings().model_timeout + 30) * 1000)
        holder = self.store.take_lease(self.cid, self.worker, ms)
        if holder is None:
            return True
        client, dead_after = self.store.client, get_settings().dead_after
        if liveness.runs(client, holder, self.worker, dead_after):
            log.info("%s model call runs on %s", self.ids, holder)
            return False
        log.warning("%s model lease of %s, which died; calling again", self.ids, holder)
        return self.store.take_lease(self.cid, self.worker, ms, force=True) is None

    def _dispatch(self, step: int) -> None:
        deadline = self.store.set_deadline(
            self.cid, step, time.time() + self.conversation.spec.tool_timeout
        )
        self.conversation.deadlines[step] = deadline
        InlineRunner().start(batch_of(self.conversation, step), then=continuation(self.cid))
        self._watchdog(step, deadline)
        log.info("%s step %d: tool calls dispatched", self.ids, step)

    def _watchdog(self, step: int, deadline: float) -> None:
        """A copy of this task at the batch's deadline, to end a batch that never answers.

        Or sooner, at the next look (:func:`look_every`), which schedules the next one.
        """
        countdown = max(0.0, deadline - time.time()) + WATCHDOG_SLACK
        countdown = min(countdown, look_every())
        advance.apply_async((self.cid,), {"look": step}, countdown=countdown, ignore_result=True)

    def _end(self, status: str, reason: str = "", text: str = "") -> str:
        if self.store.end(self.cid, status, reason, text):
            log.info("%s ended %s %s", self.ids, status, reason)
        return status


@app.task(name=MODEL_TASK, bind=True, max_retries=None, acks_late=True)
def advance(self: Task[Any, Any], conversation_id: str, look: int | None = None) -> str:
    """Move a conversation on by what is due (see the module docstring).

    ``look`` is set on the copies scheduled to look at one step's batch (its number).
    """
    store = get_store()
    conversation = store.load(conversation_id)
    if conversation is None:
        log.error("conversation_id=%s not found; nothing to do", shown(conversation_id))
        return "unknown"
    if conversation.final:
        return conversation.status
    worker = liveness.runner(str(self.request.hostname or "local"))
    try:
        return Step(store, conversation, worker).advance(look)
    except ModelError as exc:
        return _model_failed(self, store, conversation_id, exc)
    except (redis.RedisError, OSError) as exc:  # Redis or the network, for a moment
        return _blip(self, store, conversation_id, exc)
    except Exception as exc:  # a bug, or an answer nothing foresaw: end it, say why
        return _broke(store, conversation_id, exc)


#: Retries of a step that Redis or the network interrupted, before the conversation fails.
STEP_RETRIES = 5


def _blip(
    task: Task[Any, Any], store: ConversationStore, conversation_id: str, exc: Exception
) -> str:
    """Retry a step a passing outage interrupted; fail the conversation if it lasts."""
    ids = f"conversation_id={shown(conversation_id)}"
    if task.request.retries < STEP_RETRIES:
        delay = min(30.0, 2.0**task.request.retries)
        log.warning("%s step interrupted (%s), retry in %.0fs", ids, type(exc).__name__, delay)
        raise task.retry(countdown=delay, exc=exc) from exc
    return _broke(store, conversation_id, exc)


def _broke(store: ConversationStore, conversation_id: str, exc: Exception) -> str:
    """End a conversation a step could not advance: its caller gets the reason, not a hang.

    Without this a step that raised left the conversation ``running`` for good, and
    ``conversation_result`` waited out its whole timeout for nothing.
    """
    ids = f"conversation_id={shown(conversation_id)}"
    log.error("%s step failed: %s", ids, type(exc).__name__, exc_info=True)
    reason = f"toolfan could not advance the conversation: {type(exc).__name__}: {safe_str(exc)}"
    store.end(conversation_id, FAILED, clip(reason, 2_000))
    return FAILED


def _model_failed(
    task: Task[Any, Any], store: ConversationStore, conversation_id: str, exc: ModelError
) -> str:
    limit = get_settings().model_retries
    ids = f"conversation_id={shown(conversation_id)}"
    if exc.retryable and task.request.retries < limit:
        delay = min(60.0, 2.0**task.request.retries) * random.uniform(0.5, 1.0)  # noqa: S311
        log.warning("%s model call failed, retry in %.1fs: %s", ids, delay, exc)
        raise task.retry(countdown=delay, exc=exc) from exc
    log.error("%s model call failed for good: %s", ids, exc)
    store.end(conversation_id, FAILED, str(exc))
    return FAILED

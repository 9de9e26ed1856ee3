"""Checking the outcome from the outside: the emulator's accepted batches and request log,
the processes and their logs. Never the ledger: it is the thing under test.

The five counters, each one a failure of toolfan:

- **cross-talk** counts result *events* that belong to another call: one carrying
  another call's token; a success whose output does not lead with its own token; an
  error that cannot be its own (naming another function, an arguments error for valid
  arguments or none for invalid ones, anything but "unknown function" for a name no tool
  has, any error for a call whose tool builds a plain value); or one addressed to a
  (turn, call) never seeded as answerable in that session.
- **lost** counts answerable *calls* with no result event at all once the run settled,
  plus every answerable call of a session answered later than its claim lease allows.
- **duplicated** counts *calls* answered by more than one accepted event, plus
  *sessions* with more than one accepted batch (each session here is one batch's worth).
- **crashes** counts *incidents*: a service that exited by itself, or a crash record in
  a log (see :mod:`tests.fuzz.logscan`).
- **refused** counts *batches*: ``POST .../events`` requests answered 400, 409 or 422.

Informational findings (listed, never failing the run): successes expected but answered
with an error, outputs and errors not cut to size, log records that could not be written,
and toolfan errors worth a look.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulator import AcceptedBatch, RequestRecord
from tests.fuzz.ids import show
from tests.fuzz.kinds import (
    DEFAULT_GRACE,
    DEFAULT_MAX_OUTPUT_CHARS,
    DEFAULT_QUEUE_BUDGET,
    TOKEN_RE,
    TOOL_TIMEOUT,
    TOOLS,
    UNKNOWN_TIMEOUT,
    leads_with,
)
from tests.fuzz.logscan import LogScan
from tests.fuzz.plan import PlannedCall, PlannedSession
from tests.fuzz.stack import Exit

TOOL_RESULT = "agent.session.input.tool_result"
COUNTERS = ("cross-talk", "lost", "duplicated", "crashes", "refused")
REFUSED = frozenset({400, 409, 422})
API_FAULTS = ("error", "throttle", "lost")
#: Slack over the output cut for its truncation marker.
CUT_SLACK = 200
_PARAM = re.compile(r"events\[\d+\][^' ]*")
#: toolfan's errors that may end any call (a crash, a timeout, a lost ledger).
ANY_CALL_ERRORS = (
    "toolfan could not record",
    "did not complete in",
    "did not finish before",
    "timed out after",
)
#: How toolfan's argument and function errors begin, by what a call must end in.
ERROR_STARTS = {"invalid": "Invalid arguments for ", "unknown": "Unknown function "}
#: toolfan's error messages that name the function they are about.
_NAMES_FUNCTION = re.compile(
    r"^(?:Unknown function (.+)\. Available|Invalid arguments for (.+?): "
    r"|Function (.+?) (?:failed|timed out|returned|may already|did not))",
    re.S,
)


@dataclass(frozen=True)
class Problem:
    """One finding: its counter (or informational kind), a group name, and the specifics."""

    counter: str
    kind: str
    text: str
    session_id: str | None = None
    call: tuple[Any, ...] | None = None


@dataclass
class Tally:
    """The figures of one run; ``ok`` when all five counters are zero."""

    sessions: int = 0
    calls: int = 0
    answerable: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    latencies: dict[str, float] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """Nothing mixed up, lost, duplicated, crashed or refused."""
        return not any(self.counts[c] for c in COUNTERS)

    def add(
        self,
        counter: str,
        kind: str,
        text: str,
        session_id: str | None = None,
        call: PlannedCall | None = None,
    ) -> None:
        """Record a finding and count it (informational kinds are counted apart)."""
        self.counts[counter] += 1
        key = (session_id, *call.pair) if call is not None else None
        self.problems.append(Problem(counter, kind, text, session_id, key))

    def line(self) -> str:
        """The one line the run is judged by."""
        c = self.counts
        return (
            f"fuzz: {self.sessions:,} sessions, {self.calls:,} calls, "
            f"{c['cross-talk']:,} cross-talk, {c['lost']:,} lost, {c['duplicated']:,} "
            f"duplicated, {c['crashes']:,} crashes, {c['refused']:,} refused batches"
        )


def describe(session_id: str, call: PlannedCall) -> str:
    """A call named precisely enough to find it again: ids (cut when long) and kinds."""
    turn, cid = show(call.turn_id, 40), show(call.call_id, 40)
    name = "" if call.name in TOOLS else f" fn {show(call.name, 30)}"
    return f"session {show(session_id)} call ({turn}, {cid}){name} [{' '.join(call.labels)}]"


def _texts(event: Mapping[str, Any]) -> list[str]:
    output, error = event.get("output"), event.get("error")
    texts = [output] if isinstance(output, str) else []
    for part in output if isinstance(output, list) else []:
        texts += [v for k, v in part.items() if k in ("text", "image_url") and isinstance(v, str)]
    return [*texts, *([error] if isinstance(error, str) else [])]


def _first_text(event: Mapping[str, Any]) -> str:
    output = event.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list) and output and isinstance(output[0], dict):
        return str(output[0].get("text", "")) if output[0].get("type") == "input_text" else ""
    return ""


class Verifier:
    """Compares what was seeded with what the emulator accepted and the logs say."""

    def __init__(self, plan: Sequence[PlannedSession], seeded_at: Mapping[str, float]) -> None:
        self.plan = {s.session_id: s for s in plan}
        self.seeded_at = seeded_at
        self.calls = {(s.session_id, *c.pair): c for s in plan for c in s.answerable}
        self.tokens = {c.token: (s.session_id, c) for s in plan for c in s.calls}
        self.names = {c.name for s in plan for c in s.calls}
        self.tally = Tally(len(plan), sum(len(s.calls) for s in plan), len(self.calls))

    def run(
        self,
        batches: Sequence[AcceptedBatch],
        requests: Sequence[RequestRecord],
        logs: LogScan,
        exits: Sequence[Exit],
    ) -> Tally:
        """All checks; returns the tally."""
        answered: Counter[tuple[Any, ...]] = Counter()
        first: dict[str, float] = {}
        for batch in batches:
            first.setdefault(batch.session_id, batch.received_at)
            for event in batch.events:
                answered[(batch.session_id, event.get("turn_id"), event.get("call_id"))] += 1
                self._event(batch.session_id, event)
        self._sessions(Counter(b.session_id for b in batches), answered, first)
        self._refused(requests, logs)
        self._crashes(logs, exits)
        self.tally.faults = Counter(r.outcome for r in requests if r.outcome in API_FAULTS)
        return self.tally

    def _event(self, sid: str, event: Mapping[str, Any]) -> None:
        """Cross-talk and size checks of one accepted result event."""
        pair = (event.get("turn_id"), event.get("call_id"))
        call = self.calls.get((sid, *pair))
        where = f"session {show(sid)} event ({show(pair[0], 40)}, {show(pair[1], 40)})"
        if event.get("type") != TOOL_RESULT or call is None:
            why = "never seeded as answerable" if sid in self.plan else "in a session never seeded"
            self.tally.add("cross-talk", "answer to nothing seeded", f"{where}: {why}", sid)
            return
        texts = _texts(event)
        mixed = self._crosstalk(sid, call, event, texts)
        if call.must_succeed and not event.get("success") and not mixed:
            text = f"{describe(sid, call)}: {show(str(event.get('error', ''))[:120], 130)}"
            self.tally.add("unexpected error", "harmless call failed", text, sid, call)
        self._sizes(sid, call, event, texts)

    def _crosstalk(
        self, sid: str, call: PlannedCall, event: Mapping[str, Any], texts: list[str]
    ) -> bool:
        """Whether the event belongs to another call (and count it if so)."""
        foreign = {t for text in texts for t in TOKEN_RE.findall(text)} - {call.token}
        owners = [self.tokens[t] for t in sorted(foreign) if t in self.tokens]
        error = str(event.get("error", ""))
        if owners:
            other = "; ".join(describe(osid, ocall) for osid, ocall in owners[:2])
            kind, text = "foreign token", f"carries the token of {other}"
        elif event.get("success") and not leads_with(_first_text(event), call.token):
            got = show(_first_text(event)[:80], 90)
            kind, text = "success without its token", f"succeeded without its own token: {got}"
        elif not event.get("success") and _about_another(error, call.name, self.names):
            kind = "error about another function"
            text = f"got an error about another function: {show(error[:100], 110)}"
        elif not event.get("success") and _wrong_error(call, error):
            kind = "error for a call that cannot fail" if call.must_succeed else "error not its own"
            text = f"got an error another call would get: {show(error[:100], 110)}"
        else:
            return False
        self.tally.add("cross-talk", kind, f"{describe(sid, call)} {text}", sid, call)
        return True

    def _sizes(
        self, sid: str, call: PlannedCall, event: Mapping[str, Any], texts: list[str]
    ) -> None:
        """Outputs and errors must be cut to the output limit (informational)."""
        output = event.get("output")
        parts = output if isinstance(output, list) else []
        limit = DEFAULT_MAX_OUTPUT_CHARS + CUT_SLACK
        sizes = {
            "output": len(output) if isinstance(output, str) else 0,
            "text parts": sum(len(p.get("text", "")) for p in parts if isinstance(p, dict)),
            "image_url": max(
                (len(p.get("image_url", "")) for p in parts if isinstance(p, dict)), default=0
            ),
            "error": len(event.get("error") or ""),
        }
        for what, size in sizes.items():
            if size > limit:
                text = f"{describe(sid, call)}: {what} of {size:,} chars went out uncut"
                self.tally.add("oversized", f"{what} not cut", text, sid, call)
        if len(parts) > 1000:
            text = f"{describe(sid, call)}: a content array of {len(parts):,} parts went out"
            self.tally.add("oversized", "content parts not cut", text, sid, call)

    def _sessions(
        self,
        batches: Counter[str],
        answered: Counter[tuple[Any, ...]],
        first: Mapping[str, float],
    ) -> None:
        """Lost and duplicated calls, duplicated batches, answers past the lease."""
        for sid, session in self.plan.items():
            if batches[sid] > 1:
                text = f"session {show(sid)} [{session.label}]: {batches[sid]} accepted batches"
                self.tally.add("duplicated", "several batches", text, sid)
            for call in session.answerable:
                times = answered[(sid, *call.pair)]
                if times == 0:
                    why = "in a batch without it" if batches[sid] else "session got no batch"
                    text = f"{describe(sid, call)}: never answered ({why})"
                    self.tally.add("lost", why, text, sid, call)
                elif times > 1:
                    text = f"{describe(sid, call)}: answered {times} times"
                    self.tally.add("duplicated", "call answered twice", text, sid, call)
            if sid in first:
                self._latency(sid, session, first[sid] - self.seeded_at[sid])

    def _latency(self, sid: str, session: PlannedSession, took: float) -> None:
        self.tally.latencies[sid] = took
        timeouts = [
            TOOL_TIMEOUT if c.name in TOOLS else UNKNOWN_TIMEOUT for c in session.answerable
        ]
        lease = max(timeouts, default=UNKNOWN_TIMEOUT) + DEFAULT_GRACE + DEFAULT_QUEUE_BUDGET
        if took > lease:
            for call in session.answerable:
                text = f"{describe(sid, call)}: answered after {took:.0f} s, past its {lease:.0f} s lease"
                self.tally.add("lost", "answered past its lease", text, sid)

    def _refused(self, requests: Sequence[RequestRecord], logs: LogScan) -> None:
        """Refused batches, named through the worker's refusal line with the same key."""
        for record in requests:
            if record.method != "POST" or not record.path.endswith("/events"):
                continue
            if record.status not in REFUSED:
                continue
            key = record.idempotency_key or ""
            message = logs.refusals.get(key, "")
            sid = _refusal_session(message, key)
            reason = message.partition("refused for good: ")[2]
            reason = (
                reason[reason.find("HTTP ") :] if "HTTP " in reason else f"HTTP {record.status}"
            )
            kind = _refusal_kind(reason)
            self.tally.add("refused", kind, self._refusal_text(sid, record, reason), sid)

    def _refusal_text(self, sid: str | None, record: RequestRecord, reason: str) -> str:
        session = self.plan.get(sid or "")
        if session is None:
            return f"POST {show(record.path, 80)}: {show(reason[:200], 210)}"
        text = f"session {show(sid)} [{session.label}]: {show(reason[:200], 210)}"
        field = re.search(r"events\[\d+\]\.output\[\d+\]\.(text|image_url)", reason)
        wanted = {"text": "output=content_empty_text", "image_url": "output=content_empty_image"}
        culprits = [c for c in session.answerable if field and wanted[field[1]] in c.labels]
        if culprits:
            text += f"; the session holds {describe(str(sid), culprits[0])}"
        return text

    def _crashes(self, logs: LogScan, exits: Sequence[Exit]) -> None:
        for exit in exits:
            text = f"{exit.service} exited by itself with status {exit.returncode}"
            self.tally.add("crashes", f"{exit.service} exited", text)
        for incident in logs.crashes:
            text = f"{incident.service}: {incident.what}"
            text += f" (at {incident.where})" if incident.where else ""
            text += (
                f" | {incident.detail}" if incident.detail and incident.detail not in text else ""
            )
            self.tally.add("crashes", f"{incident.service}: {incident.signature}", text)
        for incident in logs.log_errors:
            self.tally.add(
                "log error",
                incident.signature,
                f"{incident.service}: {incident.what} | {incident.detail}",
            )
        for incident in logs.notes:
            self.tally.add("note", incident.signature[:80], f"{incident.service}: {incident.what}")


def _wrong_error(call: PlannedCall, error: str) -> bool:
    """Whether ``error`` cannot be this call's own: any error for a call whose tool builds a
    plain output, an arguments error for valid arguments, anything but one for invalid
    ones, anything but "unknown function" for a name no tool has (toolfan's errors that
    may end any call aside)."""
    if call.expect == "any" or any(part in error for part in ANY_CALL_ERRORS):
        return False
    if call.must_succeed:
        return True
    if call.expect == "run":
        return error.startswith(tuple(ERROR_STARTS.values()))
    return not error.startswith(ERROR_STARTS[call.expect])


def _about_another(error: str, name: str, others: Collection[str]) -> bool:
    """Whether a toolfan error message names, instead of ``name``, another function the
    run called (``others``). A name cut short in the message (at ``…`` or ``...``) is
    compared by its start."""
    match = _NAMES_FUNCTION.match(error)
    if match is None:
        return False
    named = next(g for g in match.groups() if g is not None)
    core = named.split("…")[0].split("...")[0]

    def fits(candidate: str) -> bool:
        return any(form.startswith(core) for form in (candidate, repr(candidate)))

    return not fits(name) and any(fits(other) for other in others)


def _refusal_session(message: str, key: str) -> str | None:
    """The session id of a refusal line ``session_id=<sid> key=<key> batch refused ...``."""
    marker = f" key={key} batch refused for good"
    if not key or not message.startswith("session_id=") or marker not in message:
        return None
    return message[len("session_id=") : message.index(marker)]


def _refusal_kind(reason: str) -> str:
    head = " ".join(reason.split(":")[0].split()[:3])
    param = _PARAM.search(reason)
    return f"{head} at {re.sub(r'[0-9]+', '#', param.group(0))}" if param else head


def verify(
    plan: Sequence[PlannedSession],
    seeded_at: Mapping[str, float],
    batches: Sequence[AcceptedBatch],
    requests: Sequence[RequestRecord],
    logs: LogScan,
    exits: Sequence[Exit],
) -> Tally:
    """Run every check over one finished run."""
    return Verifier(plan, seeded_at).run(batches, requests, logs, exits)

"""Reading the services' logs for crashes, from the outside.

A crash is anything the code under test did not mean to do: a task that raised (an
``execute`` must never raise, a ``submit`` only through Celery's retry), a chord that
broke because of one, a lost worker process, an unrecoverable worker error, an uncaught
traceback, a failed poll pass (the run injects no faults on listing, so none is
explained by one unless list faults were on and the message says it was emulated).
Errors toolfan logs on purpose are not crashes: a tool's own failure (``toolfan.handlers``),
a malformed entry (``toolfan.poll``), a refused batch (counted as refused). A record the
logging module could not write is noted apart: a lost log line, not a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: Errors that are toolfan's deliberate handling of bad input: (logger, message part).
HANDLED = (
    ("toolfan.handlers", ""),  # a tool's own failure, mapped to its result
    ("toolfan.poll", "unreadable required action"),
    ("toolfan.poll", "listed twice"),
)
#: How a failed poll pass shows: a JSON record with its traceback, then a plain line.
POLL_FAILED = ("poll pass failed", "poll failed")
_TASK_FAILED = re.compile(r"Task (\S+)\[([0-9a-f-]+)\] raised unexpected: (.*)", re.S)
_CHORD_FAILED = re.compile(r"Chord '[0-9a-f-]+' raised: ChordError\(.Dependency ([0-9a-f-]+)")
_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}|0x[0-9a-f]+|\b\d{2,}\b")
_FRAME = re.compile(r'File "[^"]*/((?:handlers|tasks|dispatcher)/[^"]+)", line (\d+), in (\S+)')
CRASH_WORDS = ("WorkerLostError", "Unrecoverable error", "exited with 'signal")
#: toolfan's own errors that are not crashes but deserve a line: (logger, message part).
NOTED = (
    ("toolfan.submit", "do not match the claimed calls"),
    ("toolfan.submit", "giving up after"),
    ("toolfan.execute", "giving up"),
    ("toolfan.execute", "poison call"),
)


@dataclass(frozen=True)
class Incident:
    """One crash (or lost log line) found in a log.

    Attributes:
        service: ``worker`` or ``poller``.
        what: The line that says what happened, cut to a readable length.
        signature: ``what`` with ids and numbers blanked, to group alike incidents.
        detail: The last line of the traceback, when there is one.
        where: The innermost frame of toolfan's own code in the traceback, if any.
    """

    service: str
    what: str
    signature: str
    detail: str = ""
    where: str = ""


@dataclass
class LogScan:
    """Crashes, lost log lines, noted errors, and refusal messages by idempotency key."""

    crashes: list[Incident] = field(default_factory=list)
    log_errors: list[Incident] = field(default_factory=list)
    notes: list[Incident] = field(default_factory=list)
    refusals: dict[str, str] = field(default_factory=dict)
    pass_recorded: bool = False  # a failed pass's record was counted; skip its plain line


def _incident(service: str, what: str, detail: str = "") -> Incident:
    what = what.strip()
    signature = _NOISE.sub("#", what)[:160]
    frames = _FRAME.findall(detail)
    where = "{}:{} in {}".format(*frames[-1]) if frames else ""
    last = detail.strip().splitlines()[-1][:300] if detail.strip() else ""
    return Incident(service, what[:400], signature, last, where)


def _records(text: str) -> Iterator[tuple[dict[str, Any] | None, str]]:
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                yield json.loads(line), line
                continue
            except ValueError:
                pass
        yield None, line


def scan(logs: dict[str, str], list_faults: bool = False) -> LogScan:
    """Scan every service log (by service name)."""
    found = LogScan()
    for service, text in logs.items():
        _scan_one(found, service, text, list_faults)
    return found


_CHAINED = ("During handling of the above exception", "The above exception was the direct")


def _scan_one(found: LogScan, service: str, text: str, list_faults: bool) -> None:
    failed_tasks = set(re.findall(r"Task \S+\[([0-9a-f-]+)\] raised unexpected", text))
    block: list[str] | None = None  # a plain-text traceback being read
    block_kind, ended = "", False  # ended: its exception line was read (chains may follow)
    for record, line in _records(text):
        if block is not None and block_kind == "log_error":
            block.append(line)  # logging's report ends with the record's arguments
            if line.startswith("Arguments:"):
                _close_block(found, service, block_kind, block)
                block = None
            continue
        if block is not None:
            if not line or line.startswith((" ", "\t", "Traceback", *_CHAINED)):
                block.append(line)
                ended = ended and not line.startswith("Traceback")
                continue
            if not ended:
                block.append(line)  # the exception line; a chained one may follow
                ended = True
                continue
            _close_block(found, service, block_kind, block)
            block = None
        if record is not None:
            _record(found, service, record, failed_tasks, list_faults)
        elif line.startswith(("--- Logging error ---", "Traceback (most recent call last)")):
            block, ended = [line], False
            block_kind = "log_error" if line.startswith("---") else "traceback"
        elif POLL_FAILED[1] in line:
            if not found.pass_recorded and not (list_faults and "(emulated)" in line):
                found.crashes.append(_incident(service, line))
            found.pass_recorded = False
        elif any(word in line for word in CRASH_WORDS):
            found.crashes.append(_incident(service, line))
    if block is not None:
        _close_block(found, service, block_kind, block)


def _close_block(found: LogScan, service: str, kind: str, block: list[str]) -> None:
    head = block[: block.index("Call stack:")] if "Call stack:" in block else block
    last = next((b for b in reversed(head) if b and not b.startswith(" ")), head[-1])
    if kind == "log_error":
        message = next((b for b in block if b.startswith("Message:")), last)
        found.log_errors.append(_incident(service, f"log record not written: {last}", message))
    else:
        found.crashes.append(_incident(service, f"uncaught: {last}", "\n".join(block)))


def _record(
    found: LogScan, service: str, record: dict[str, Any], failed: set[str], list_faults: bool
) -> None:
    level = str(record.get("level", ""))
    message = str(record.get("message", ""))
    logger = str(record.get("logger", ""))
    exception = str(record.get("exception", ""))
    if logger == "toolfan.submit" and "refused for good" in message:
        key = re.search(r" key=(\S+) batch refused for good: ", message)
        if key:
            found.refusals[key.group(1)] = message
        return
    if any(logger == name and part in message for name, part in NOTED):
        found.notes.append(_incident(service, f"{logger}: {message}"))
        return
    crash_words = any(word in message or word in exception for word in CRASH_WORDS)
    if level not in ("ERROR", "CRITICAL") and not crash_words:
        return
    if not crash_words and any(logger == n and part in message for n, part in HANDLED):
        return
    if message.startswith(POLL_FAILED[0]):  # its plain line follows: one incident
        found.pass_recorded = True
        if list_faults and "(emulated)" in exception:
            return
    task = _TASK_FAILED.match(message)
    if task:
        what = f"task {task.group(1)} raised unexpected: {task.group(3)}"
        found.crashes.append(_incident(service, what, exception))
        return
    chord = _CHORD_FAILED.search(message)
    if chord and chord.group(1) in failed:
        return  # the chord of a task already counted: the same crash
    found.crashes.append(_incident(service, f"{logger}: {message}", exception))

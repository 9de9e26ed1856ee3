"""One pass over the watched runs (and, on Foundry, the recent threads' runs).

Each watched run is read once a pass (one request; ``TOOLFAN_RUNS_READERS`` at a time, and
a run that waits is dispatched as the reads come in), except a run whose phase is in flight
under a claim (this poller's or another's): nothing about it can change but a cancel, a
failure or an expiry, so it rests ``TOOLFAN_RUNS_RECHECK`` seconds (1) after its first read,
and each read that finds the same claim doubles its rest up to ``TOOLFAN_RUNS_RECHECK_MAX``
(8). A fast loop does not read hundreds of busy runs five times a second, and a phase of
long calls costs a read every few seconds, not one a second. A run read in a model turn
(queued, in progress, cancelling) rests as long as that answer's ``openai-poll-after-ms``
asks, as the SDK's own polling does, at most ``TOOLFAN_RUNS_RECHECK_MAX``.
A run waiting in ``requires_action`` is one batch, handed to the engine's dispatcher
(claims, chords, expiry at the run's own ``expires_at``); a run that is over, or past its
``expires_at``, is no longer watched.
With ``TOOLFAN_RUNS_DISCOVER=threads`` (Foundry only, the one flavour that lists threads)
the pass also lists up to ``TOOLFAN_RUNS_MAX_THREADS`` threads, most recent first, and
reads each one's latest runs: one request per 100 threads plus one per thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from dispatcher.errors import APIError, NotFoundError
from dispatcher.once import OnceLog
from dispatcher.sources.assistants import NAME, batch_id, get_client, phase_of
from dispatcher.sources.assistants_client import AssistantsClient
from dispatcher.sources.assistants_models import Run
from dispatcher.sources.assistants_watch import Watch, Watches
from handlers import jsonsafe
from handlers.text import shown
from tasks import metrics
from tasks.dispatch import Batch, DispatchCounts, Dispatcher, PendingCall, count_into
from tasks.ledger import Ledger
from tasks.liveness import Reaper
from tasks.memo import DispatchMemo
from tasks.runtime import get_ledger
from tasks.settings import Settings, get_settings

log = logging.getLogger("toolfan.poll")

T = TypeVar("T")
R = TypeVar("R")

#: Runs read per thread when discovering runs through the thread list.
RUNS_PER_THREAD = 5
#: Waiting runs a pass dispatches together as its reads come in (one ledger round trip).
DISPATCH_EVERY = 25
#: Seconds every read takes at least when the API is far (over a network). A pass reads
#: one run at a time until FAR_AFTER reads in a row took that long (one slow read may be a
#: pause of either side), then the rest ``TOOLFAN_RUNS_READERS`` at once.
FAR_READ = 0.01
FAR_AFTER = 3
#: What the line of a :meth:`RunsPoller.poll_new` pass starts with.
NEW_ONLY = "runs (newly watched)"


@dataclass
class RunsSummary:
    """What one pass over the runs saw and did."""

    runs_seen: int = 0
    runs_waiting: int = 0
    runs_dispatched: int = 0
    calls_dispatched: int = 0
    calls_resubmitted: int = 0
    calls_expired: int = 0
    skipped_in_flight: int = 0
    runs_resting: int = 0
    stale_claims: int = 0
    skipped_submitted: int = 0
    runs_finished: int = 0
    errors: int = 0
    orphans_restored: int = 0
    #: What the line starts with: a full pass, or one of :meth:`RunsPoller.poll_new`.
    label: str = field(default="runs", compare=False)

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return {k: v for k, v in asdict(self).items() if k != "label"}

    def add(self, counts: DispatchCounts) -> None:
        """Count in what the dispatcher did."""
        count_into(self, counts, "runs_dispatched")

    def line(self) -> str:
        """The one-line summary."""
        return (
            f"{self.label}: {self.runs_seen} runs seen, {self.runs_waiting} waiting; "
            f"{self.calls_dispatched} calls dispatched in {self.runs_dispatched} runs, "
            f"{self.calls_resubmitted} saved results resubmitted, {self.calls_expired} "
            f"answered as expiring; skipped {self.skipped_in_flight} in flight "
            f"({self.stale_claims} stale claims, {self.runs_resting} runs left unread), "
            f"{self.skipped_submitted} submitted; "
            f"{self.runs_finished} runs finished; {self.errors} errors"
            + (f"; {self.orphans_restored} orphaned calls redone" if self.orphans_restored else "")
        )


class RunsPoller:
    """One pass over the runs, with its collaborators injected for tests."""

    def __init__(
        self,
        client: AssistantsClient,
        ledger: Ledger,
        settings: Settings,
        memo: DispatchMemo | None = None,
        stop: threading.Event | None = None,
        reaper: Reaper | None = None,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.settings = settings
        self.stop = stop
        self.watches = Watches(ledger.client)
        self.dispatcher = Dispatcher(NAME, ledger, settings, memo, reaper, "run")
        self.reported = OnceLog(log)
        #: Batch id -> ``time.monotonic()`` of its run's last read (or failed try), for the
        #: watched runs.
        self.read_at: dict[str, float] = {}
        #: Batch id -> the claim that held its phase in flight when last checked, and the
        #: seconds its run rests between reads while that claim holds.
        self.rests: dict[str, tuple[str, float]] = {}
        #: Batch id -> ``time.monotonic()`` before which its run, read in a model turn, is
        #: not read again: as long as that answer's ``openai-poll-after-ms`` asked.
        self.turn_rests: dict[str, float] = {}
        #: The reader threads (``TOOLFAN_RUNS_READERS``), started by the first far pass.
        self._pool: ThreadPoolExecutor | None = None
        #: Whether the last pass went on reading several at once (to log the changes).
        self._far = False
        #: Statuses seen and watches ended, written together (see :meth:`_record`).
        self._seen: list[tuple[Watch, str]] = []
        self._dropped: list[str] = []

    def poll_once(self) -> RunsSummary:
        """Read every watched run (but those resting) and dispatch the phases that wait."""
        summary = RunsSummary()
        started = time.perf_counter()
        self.dispatcher.begin_pass()
        watches = self.watches.all()
        resting = self._resting(watches)
        summary.runs_resting = len(resting)
        unread = [w for w in watches if w.batch_id not in resting]
        counts = DispatchCounts()
        known = self._read_and_dispatch(unread, summary, counts)
        if self.settings.runs_discover == "threads" and self.client.config.lists_threads:
            self._dispatch(self._discovered(summary, known), counts)
        summary.add(counts)
        summary.orphans_restored = self.dispatcher.end_pass()
        metrics.POLL_DURATION.observe(time.perf_counter() - started)
        log.info("%s", summary.line(), extra=summary.as_dict())
        return summary

    def poll_new(self) -> RunsSummary:
        """Read only the watched runs this poller has not read (or tried to), and dispatch.

        What a looping poller does between its passes when :mod:`dispatcher.wake`'s bell
        rings: a newly watched run is read at once instead of up to an interval later,
        and the runs already read keep their schedule (their rests, the pass's orphan
        check), so a burst of watches costs reads of the new runs only.
        """
        summary = RunsSummary(label=NEW_ONLY)
        fresh = [w for w in self.watches.all() if w.batch_id not in self.read_at]
        counts = DispatchCounts()
        self._read_and_dispatch(fresh, summary, counts)
        summary.add(counts)
        log.info("%s", summary.line(), extra=summary.as_dict())
        return summary

    def _read_and_dispatch(
        self, watches: list[Watch], summary: RunsSummary, counts: DispatchCounts
    ) -> set[str]:
        """Read each run; dispatch those waiting as the reads come in. Their batch ids."""
        known: set[str] = set()
        pending: list[Batch] = []
        try:
            for watch, read in self._reads(watches):
                batch = self._watched(watch, read, summary)
                if batch is not None:
                    known.add(batch.batch_id)
                    pending.append(batch)
                if len(pending) >= DISPATCH_EVERY:  # the fleet starts while the pass reads on
                    self._record()
                    self.dispatcher.dispatch(pending, counts)
                    pending = []
        finally:  # a pass cut short by a stop still records what it saw
            self._record()
        self._dispatch(pending, counts)
        return known

    def _record(self) -> None:
        """Write the statuses seen and the watches ended since the last call, in one trip."""
        seen, self._seen = self._seen, []
        dropped, self._dropped = self._dropped, []
        self.watches.record(seen, dropped)

    def _dispatch(self, batches: list[Batch], counts: DispatchCounts) -> None:
        for start in range(0, len(batches), 100):
            self.dispatcher.dispatch(batches[start : start + 100], counts)

    def dispatch_run(self, run: Run, summary: RunsSummary | None = None) -> RunsSummary:
        """Dispatch one run read elsewhere (a pushed event, ``POST /runs/watch``)."""
        summary = summary if summary is not None else RunsSummary()
        batch = self._batch(run, summary)
        if batch is not None:
            counts = DispatchCounts()
            self.dispatcher.dispatch([batch], counts)
            summary.add(counts)
        return summary

    def _resting(self, watches: list[Watch]) -> set[str]:
        """The watched runs not to read this pass.

        Those read in a model turn whose answer asked for a later read (see
        :meth:`_rest_turn`), and those in flight under a claim, read lately (see
        :meth:`_in_flight`).
        """
        ids = {w.batch_id for w in watches}
        self.read_at = {bid: t for bid, t in self.read_at.items() if bid in ids}
        now = time.monotonic()
        self.turn_rests = {b: t for b, t in self.turn_rests.items() if b in ids and t > now}
        return set(self.turn_rests) | self._in_flight(now)

    def _in_flight(self, now: float) -> set[str]:
        """The runs in flight under a claim, read lately.

        A live claim (this poller's or another's) means a dispatch of the run's phase is in
        flight; it is freed when the phase is submitted, and lapses when its holder dies,
        and then the run is read on the next pass. While one claim holds, the run rests
        ``runs_recheck`` seconds after its last read, and each time it is read again under
        that same claim its rest doubles, up to ``runs_recheck_max``: a cancel is seen
        within a second early in a phase, and a phase of 30 s calls costs 6 reads, not 30.
        Checking the claims costs one Redis round trip, against one API request per run.
        """
        first = self.settings.runs_recheck
        if first == 0:
            return set()
        longest = max(first, self.settings.runs_recheck_max)
        # A run read longer ago than the longest rest is read this pass whatever its claim
        # (it keeps its rest: the next pass checks its claim again).
        recent = [bid for bid, t in self.read_at.items() if now - t < longest]
        owners = self.ledger.claim_owners(recent) if recent else []
        resting: set[str] = set()
        rests = {bid: r for bid, r in self.rests.items() if bid in self.read_at}
        for bid, owner in zip(recent, owners, strict=True):
            if owner is None:  # nothing in flight: the run is read
                rests.pop(bid, None)
                continue
            held, rest = self.rests.get(bid, (owner, first))
            rest = rest if held == owner else first
            if now - self.read_at[bid] < rest:
                resting.add(bid)
            else:  # read now, still under the same claim: its next rest is twice as long
                rest = min(2 * rest, longest)
            rests[bid] = (owner, rest)
        self.rests = rests
        return resting

    def _stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def _reads(self, watches: list[Watch]) -> Iterator[tuple[Watch, Run | APIError]]:
        """Each watched run as read (or the API's error), in order."""
        return self._each(watches, lambda w: self.client.retrieve_run(w.thread_id, w.run_id))

    def _each(self, items: Sequence[T], read: Callable[[T], R]) -> Iterator[tuple[T, R | APIError]]:
        """``read`` of each item (or the API's error), in order: several at once if far.

        A pass over many runs (or threads) is one request each: read one after another,
        400 runs at 100 ms a request take 40 s. So each pass reads one item at a time
        while the API answers within :data:`FAR_READ`, and once :data:`FAR_AFTER` reads in
        a row took longer (the time is the network's), the rest of the pass goes out
        ``runs_readers`` at once; the client's pool is shared and thread-safe, and what is
        done with each answer stays in this thread, in order. An API that answers sooner
        (on this host or next to it) is never read by threads that would only contend for
        the interpreter and the cores the fleet runs on. A stop cancels the reads not yet
        started.
        """
        done, slow, quick = 0, 0, False
        while slow < FAR_AFTER and done < len(items):
            if self._stopping():
                return
            answer, seconds = _timed(read, items[done])
            yield items[done], answer
            done += 1
            slow, quick = (slow + 1, quick) if seconds >= FAR_READ else (0, True)
        if slow >= FAR_AFTER or quick:  # else too few reads to tell (a wake's one new run)
            self._reading(far=slow >= FAR_AFTER)
        if done < len(items):
            yield from self._together(items[done:], read)

    def _reading(self, *, far: bool) -> None:
        """Say when passes start or stop reading several items at once."""
        if far != self._far:
            limit = f"{FAR_READ * 1000:.0f} ms"
            how = (
                f"{self.settings.runs_readers} at once: reads take {limit} or more"
                if far
                else f"one at a time: reads take under {limit}"
            )
            log.info("runs poller: reading %s", how)
        self._far = far

    def _together(
        self, items: Sequence[T], read: Callable[[T], R]
    ) -> Iterator[tuple[T, R | APIError]]:
        """``read`` of each item, ``runs_readers`` at a time, in order."""
        readers = self.settings.runs_readers
        if self._pool is None and readers > 1 and len(items) > 1:
            self._pool = ThreadPoolExecutor(readers, thread_name_prefix="toolfan-runs-read")
        futures: list[Future[tuple[R | APIError, float]]] = []
        if self._pool is None:
            answers: Iterator[tuple[R | APIError, float]] = (_timed(read, i) for i in items)
        else:
            futures = [self._pool.submit(_timed, read, i) for i in items]
            answers = (f.result() for f in futures)
        try:
            for item, (answer, _) in zip(items, answers, strict=True):
                if self._stopping():
                    return
                yield item, answer
        finally:
            for future in futures:
                future.cancel()

    def _watched(self, watch: Watch, run: Run | APIError, summary: RunsSummary) -> Batch | None:
        """What one read of a watched run means: a batch to dispatch, or None."""
        ids = f"thread_id={shown(watch.thread_id)} run_id={shown(watch.run_id)}"
        if isinstance(run, NotFoundError):
            log.warning("%s no such run; no longer watched", ids)
            self._dropped.append(watch.batch_id)
            return None
        # A failed read counts as a read: a wake's pass (:meth:`poll_new`) reads only runs
        # not read yet, and must not retry a failing one on every wake (up to twenty times
        # a second against an API that refuses it); the next full pass reads it again.
        self.read_at[watch.batch_id] = time.monotonic()
        if isinstance(run, APIError):
            summary.errors += 1
            metrics.POLL_ERRORS.labels("run").inc()
            self.reported.error(watch.batch_id, "%s %s", ids, run)
            return None
        summary.runs_seen += 1
        if run.finished or _past(run):
            summary.runs_finished += 1
            log.info("%s run is %s; no longer watched", ids, run.status)
            if run.status != "completed":  # its queued calls must not run any more
                self.ledger.end_batch(
                    batch_id(run.thread_id, run.run_id), f"the run is {run.status}"
                )
            self._dropped.append(watch.batch_id)
            return None
        if watch.status != run.status:
            self._seen.append((watch, run.status))
        self._rest_turn(run)
        return self._batch(run, summary)

    def _rest_turn(self, run: Run) -> None:
        """Rest a run read in a model turn as long as the API asked, at most the longest rest.

        A run that is queued or in progress changes only when the model's turn ends, and
        the API's answer says when to look again (``openai-poll-after-ms``, which the SDK's
        own polling sleeps by): reading it on every pass until then costs the API requests
        that tell nothing. No header, or ``TOOLFAN_RUNS_RECHECK_MAX=0``: read every pass.
        """
        bid = batch_id(run.thread_id, run.run_id)
        rest = min(run.poll_after or 0.0, self.settings.runs_recheck_max)
        if run.busy and rest > 0:
            self.turn_rests[bid] = time.monotonic() + rest
        else:
            self.turn_rests.pop(bid, None)

    def _discovered(self, summary: RunsSummary, known: set[str]) -> list[Batch]:
        batches = []
        try:
            threads = list(self.client.list_threads(self.settings.runs_max_threads))
        except APIError as exc:
            summary.errors += 1
            self.reported.error("threads", "listing threads failed: %s", exc)
            return []
        for thread_id, runs in self._each(threads, self._runs_of):
            if isinstance(runs, APIError):
                summary.errors += 1
                self.reported.error(thread_id, "thread_id=%s runs unreadable: %s", thread_id, runs)
                continue
            for run in runs:
                summary.runs_seen += 1
                if batch_id(run.thread_id, run.run_id) in known:
                    continue
                batch = self._batch(run, summary)
                if batch is not None:
                    batches.append(batch)
        return batches

    def _runs_of(self, thread_id: str) -> list[Run]:
        """A discovered thread's latest runs (one request)."""
        return self.client.runs_of(thread_id, RUNS_PER_THREAD)

    def _batch(self, run: Run, summary: RunsSummary) -> Batch | None:
        """The batch of a waiting run's phase, or None while it does not wait."""
        for problem in run.problems:
            summary.errors += 1
            metrics.POLL_ERRORS.labels("action").inc()
            self.reported.error(
                batch_id(run.thread_id, run.run_id),
                "thread_id=%s run_id=%s unreadable tool call: %s",
                shown(run.thread_id),
                shown(run.run_id),
                problem,
            )
        if not run.waiting or not run.tool_calls:
            return None
        summary.runs_waiting += 1
        phase = phase_of([c.call_id for c in run.tool_calls])
        calls = [self._call(phase, c.call_id, c.name, c.arguments) for c in run.tool_calls]
        return Batch(
            batch_id(run.thread_id, run.run_id),
            calls,
            expires_at=run.expires_at,
            agent_id=run.assistant_id,
            metadata=run.metadata,
            declared=run.declared,
        )

    def _call(self, phase: str, call_id: str, name: str, arguments: object) -> PendingCall:
        problem = jsonsafe.check(
            arguments,
            max_depth=self.settings.max_depth,
            max_bytes=self.settings.max_argument_bytes,
        )
        return PendingCall(
            phase, call_id, name, None if problem is not None else arguments, problem
        )


def _timed(read: Callable[[T], R], item: T) -> tuple[R | APIError, float]:
    """``read(item)`` (or the API's error, returned), and the seconds it took."""
    started = time.perf_counter()
    try:
        answer: R | APIError = read(item)
    except APIError as exc:
        answer = exc
    return answer, time.perf_counter() - started


def _past(run: Run) -> bool:
    """Whether the run's own deadline has passed (it cannot take outputs any more)."""
    return run.expires_at is not None and time.time() >= run.expires_at


#: The dispatches of this process's runs poller, kept across passes.
_MEMO = DispatchMemo()


def runs_poller(reaper: Reaper | None = None) -> RunsPoller:
    """A runs poller on this process's client, ledger and settings."""
    return RunsPoller(get_client(), get_ledger(NAME), get_settings(), _MEMO, reaper=reaper)

"""The control worker a bare ``toolfan worker`` starts beside its prefork pool.

toolfan's own tasks (a batch's delivery, a poll, a pushed session's dispatch, a model call)
spend their time waiting for the API. On a prefork pool each wait holds a whole process, so
one worker on every queue delivers at most *processes / the API's answer time* batches a
second, whatever the tools cost: 20 with four processes and an API answering in 200 ms.
So ``toolfan worker`` without ``-Q`` or another pool runs two Celery workers:

* itself, the prefork pool, on the function queues, with the user's options;
* a child on the control queues with a pool of ``TOOLFAN_CONTROL_THREADS`` threads (16),
  named ``control@<host>`` (``<name>-control@<host>`` after the user's ``-n``), which waits for
  the API without holding a process.

The child is started first and the pool only once it is ready, so the pool's ``ready.``
line means both consume. It shares the terminal's process group (Ctrl-C reaches both, as it
reaches a prefork pool), is sent the SIGTERM or SIGQUIT the pool gets on its own (systemd's
``KillMode=mixed``, ``docker stop``, Kubernetes), is stopped and awaited when the pool
stops, dies with it when the pool's process is killed alone (``PR_SET_PDEATHSIG``), and is
started again, with a back-off, if it dies while the pool runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("toolfan.worker")

#: Environment variable naming the pipe the child writes one byte to once it consumes.
READY_FD = "TOOLFAN_CONTROL_READY_FD"
#: Environment variable naming the pid the child must die with.
PARENT_PID = "TOOLFAN_CONTROL_PARENT"
#: Seconds the pool waits for the child's start before it starts anyway.
READY_TIMEOUT = 90.0
#: Back-off between restarts of a child that keeps dying: first, longest (seconds).
RESTART_FIRST, RESTART_MAX = 1.0, 30.0
#: A child that ran this long before dying is restarted after the first back-off again.
STABLE_AFTER = 60.0

#: Worker options that take a value and belong to the pool alone (or would clash: two
#: workers writing one pid file or state database, or both running the embedded beat).
_POOL_VALUED = frozenset(
    {
        "-c",
        "--concurrency",
        "-n",
        "--hostname",
        "-P",
        "--pool",
        "--autoscale",
        "--max-tasks-per-child",
        "--max-memory-per-child",
        "--pidfile",
        "-S",
        "--statedb",
        "-s",
        "--schedule-filename",
        "--schedule",
    }
)
#: Flag options of the pool alone.
_POOL_FLAGS = frozenset({"-B", "--beat"})
#: Options after which the user has chosen the queues or the process model: no split.
_NO_SPLIT = frozenset(
    {"-Q", "--queues", "-X", "--exclude-queues", "-D", "--detach", "-h", "--help"}
)


@dataclass(frozen=True)
class Split:
    """The two workers' ``celery worker`` options."""

    pool: list[str]
    control: list[str]


def plan(
    options: Sequence[str],
    function_queues: Sequence[str],
    control_queues: Sequence[str],
    threads: int,
) -> Split | None:
    """The pool's and the control worker's options, or None when one worker takes it all.

    No split when ``threads`` is 0, when there is no function queue, when the user names
    the queues (``-Q``, ``-X``), detaches (``-D``), asks for the help text, or picks a pool
    other than prefork: a pool of threads or greenlets already waits for the API without
    holding a process.
    """
    if threads <= 0 or not function_queues or _has(options, _NO_SPLIT):
        return None
    pool = option_value(options, ("-P", "--pool"))
    if pool is not None and pool != "prefork":
        return None
    name = option_value(options, ("-n", "--hostname"))
    control = _without(options, _POOL_VALUED, _POOL_FLAGS)
    control += ["-Q", ",".join(control_queues), "-P", "threads", "-c", str(threads)]
    control += ["-n", control_nodename(name)]
    return Split(pool=[*options, "-Q", ",".join(function_queues)], control=control)


def control_nodename(name: str | None) -> str:
    """The control worker's node name, from the pool's ``-n`` (None: Celery's default)."""
    if not name:
        return "control@%h"
    if "@" not in name:  # Celery reads a bare -n as the host: celery@<name>
        return f"control@{name}"
    local, host = name.split("@", 1)
    # A suffix, not a prefix: "<name>@<host> ready." must not be part of the control
    # worker's own "ready." line, for whoever waits for the pool's.
    return f"{local}-control@{host}"


def _matches(option: str, names: frozenset[str]) -> str | None:
    """The name among ``names`` that ``option`` is, or starts with (``--x=v``, ``-cV``)."""
    if option in names:
        return option
    if option.startswith("--"):
        long = option.split("=", 1)[0]
        return long if "=" in option and long in names else None
    short = option[:2]
    return short if len(option) > 2 and short in names else None


def _has(options: Sequence[str], names: frozenset[str]) -> bool:
    return any(_matches(o, names) is not None for o in options)


def option_value(options: Sequence[str], names: Sequence[str]) -> str | None:
    """The value given to an option (its last use, as Celery reads it), in any spelling."""
    found: str | None = None
    for i, option in enumerate(options):
        for name in names:
            if option == name and i + 1 < len(options):
                found = options[i + 1]
            elif name.startswith("--") and option.startswith(name + "="):
                found = option[len(name) + 1 :]
            elif not name.startswith("--") and option.startswith(name) and len(option) > 2:
                found = option[2:].removeprefix("=")
    return found


def _without(options: Sequence[str], valued: frozenset[str], flags: frozenset[str]) -> list[str]:
    """``options`` without the named ones (and the values of the valued ones)."""
    kept: list[str] = []
    skip = False
    for option in options:
        if skip:
            skip = False
            continue
        if option in valued:
            skip = True
            continue
        if _matches(option, valued) is not None or option in flags:
            continue
        kept.append(option)
    return kept


class ControlWorker:
    """The child worker on the control queues: started, awaited, restarted, stopped."""

    def __init__(self, options: Sequence[str]) -> None:
        self.options = list(options)
        self.proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def start(self, ready_timeout: float = READY_TIMEOUT) -> None:
        """Start the child and wait (at most ``ready_timeout``) until it consumes."""
        proc, ready = self._spawn()
        try:
            if not _await_ready(proc, ready, ready_timeout):
                log.error(
                    "the control worker did not start within %gs (exit code %s); the pool "
                    "starts anyway, and the control worker is restarted if it died",
                    ready_timeout,
                    proc.poll(),
                )
        finally:
            os.close(ready)
        self._watcher = threading.Thread(target=self._watch, name="control-worker", daemon=True)
        self._watcher.start()

    def forward(self, sig: int) -> None:
        """Send the child a shutdown signal the pool received; it is not restarted after."""
        self._stopping.set()
        with self._lock:
            proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)

    def stop(self) -> None:
        """Warm-stop the child (if it still runs) and wait until the watcher has seen it go."""
        self.forward(signal.SIGTERM)
        if self._watcher is not None:
            self._watcher.join()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], int]:
        read, write = os.pipe()
        env = {**os.environ, READY_FD: str(write), PARENT_PID: str(os.getpid())}
        env.pop("TOOLFAN_METRICS_PORT", None)  # the pool serves every process's samples
        env["PYTHONPATH"] = import_path()
        try:
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-P", "-m", "tasks.control_worker", *self.options],
                env=env,
                pass_fds=(write,),
            )
        finally:
            os.close(write)
        with self._lock:
            self.proc = proc
            stopping = self._stopping.is_set()
        if stopping:  # a shutdown came while the watcher was restarting it: pass it on
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        return proc, read

    def _watch(self) -> None:
        """Wait on the child; restart it while the pool runs. Runs until the child is gone.

        This thread spawns the restarted children, so it must outlive each of them: the
        kernel's parent-death signal follows the thread that forked, not the process.
        """
        delay = RESTART_FIRST
        while True:
            assert self.proc is not None
            started = time.monotonic()
            code = self.proc.wait()
            _forget(self.proc.pid)
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE_AFTER:
                delay = RESTART_FIRST
            log.error(
                "the control worker (pid %d) exited with code %s; starting it again in %gs",
                self.proc.pid,
                code,
                delay,
            )
            if self._stopping.wait(delay):
                return
            _, ready = self._spawn()
            os.close(ready)
            delay = min(delay * 2, RESTART_MAX)


def import_path() -> str:
    """The control worker's ``PYTHONPATH``: the pool's first import path, then its own.

    ``python -m`` would put the working directory first, where a project's own ``tasks.py``
    (a Celery habit) would hide toolfan's ``tasks`` package from the control worker alone.
    So it runs with ``-P``, which leaves that out, and gets the pool's first entry instead
    (its script's directory, or the directory ``python -m`` gave it): whatever the pool
    imports, the control worker imports the same.
    """
    first = os.path.abspath(sys.path[0]) if sys.path and sys.path[0] else os.getcwd()
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (first, rest) if p)


def _await_ready(proc: subprocess.Popen[bytes], ready: int, timeout: float) -> bool:
    """Wait for the child's byte on ``ready``; False if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([ready], [], [], min(left, 0.5))
        if readable:
            return os.read(ready, 1) == b"r"
        if proc.poll() is not None:
            return False
    return False


def _forget(pid: int) -> None:
    """Drop a dead child's live gauges (multiprocess metrics)."""
    from tasks import metrics

    metrics.process_exited(pid)


# --- the child ---------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the pool's process dies (Linux); exit if it has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request took effect
        sys.exit(0)


def _report_ready(fd: int) -> None:
    """Write the ready byte once the worker consumes, then close the pipe."""
    from celery.signals import worker_ready

    def ready(**kwargs: Any) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, b"r")
            os.close(fd)

    worker_ready.connect(ready, weak=False)


def main(argv: Sequence[str] | None = None) -> int:
    """The child's entry point: ``python -m tasks.control_worker OPTIONS``."""
    options = list(sys.argv[1:] if argv is None else argv)
    parent = os.environ.pop(PARENT_PID, "")
    if parent.isdigit():
        _die_with_parent(int(parent))
    fd = os.environ.pop(READY_FD, "")
    if fd.isdigit():
        _report_ready(int(fd))
    from tasks.worker import run_worker

    return run_worker(options)


if __name__ == "__main__":
    sys.exit(main())

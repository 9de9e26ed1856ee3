"""``dispatcher.devstack.stopped_by_signals``: which signals it takes over, and what it leaves."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dispatcher.devstack import Service, Stopped, stopped_by_signals, until_stopped, wait_for


@pytest.fixture
def endings_at_default():
    """SIGTERM and SIGHUP at their default action for the test, then as they were."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for s in before:
        signal.signal(s, signal.SIG_DFL)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def end_twice() -> None:
    """A SIGTERM, then a SIGHUP while the first one's exception unwinds the stack."""
    with stopped_by_signals():
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.raise_signal(signal.SIGHUP)  # while stopping: ignored, not a second raise


def test_an_ending_signal_raises_stopped_once_and_later_ones_are_ignored(endings_at_default):
    with pytest.raises(Stopped) as raised:
        end_twice()
    assert raised.value.code == 128 + signal.SIGTERM
    assert raised.value.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back on the way out
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


def test_a_signal_ignored_before_stays_ignored(endings_at_default):
    # nohup: the caller asked for the run to survive a closed terminal.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with stopped_by_signals():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert callable(signal.getsignal(signal.SIGTERM))
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_outside_the_main_thread_nothing_changes(endings_at_default):
    seen = []

    def enter() -> None:
        with stopped_by_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [signal.SIG_DFL]


def test_a_command_stopped_by_a_signal_says_so_and_exits_128_plus_it(endings_at_default, capsys):
    def body() -> int:
        signal.raise_signal(signal.SIGHUP)
        return 0  # never reached

    assert until_stopped("demo", lambda: 7) == 7
    assert until_stopped("demo", body) == 128 + signal.SIGHUP
    err = capsys.readouterr().err
    assert err == "demo: stopped by SIGHUP; its services are stopped\n"


#: A service that, once sent SIGTERM, says so and stops only when told (argv[1] appears, or
#: 15 s pass: within Service.stop's 20 s), with a child that ignores SIGTERM.
SLOW_TO_STOP = """
import os, signal, subprocess, sys, time
deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
child = subprocess.Popen([sys.executable, "-c", deaf])

def stopping(*_):
    print("stopping", flush=True)
    until = time.monotonic() + 15
    while not os.path.exists(sys.argv[1]) and time.monotonic() < until:
        time.sleep(0.02)
    sys.exit(0)

signal.signal(signal.SIGTERM, stopping)
print("child", child.pid, flush=True)
time.sleep(120)
"""


def test_a_signal_while_a_service_stops_lets_that_stop_finish_first(endings_at_default, tmp_path):
    log, done = tmp_path / "slow.log", tmp_path / "may-stop"
    service = Service.__new__(Service)  # the command is not toolfan's: set what stop() uses
    service.log_path, service._log = log, open(log, "w")  # noqa: SIM115 - stop() closes it
    service.proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_TO_STOP, str(done)],
        stdout=service._log,
        start_new_session=True,
    )

    def signal_while_it_stops() -> None:
        """SIGTERM to this process once the service is stopping; then let the service end."""
        wait_for(lambda: "stopping" in log.read_text(), 30, "the service to stop", 0.02)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the main thread takes the signal at its next bytecode
        done.touch()

    try:
        wait_for(lambda: "child" in log.read_text(), 30, "the service to start", 0.05)
        deaf = int(log.read_text().split()[1])
        with stopped_by_signals():
            sender = threading.Thread(target=signal_while_it_stops)
            sender.start()
            with pytest.raises(Stopped):
                service.stop()
            sender.join(30)  # inside: a late signal must not meet the default action
        assert service.proc.returncode == 0  # it had its time to stop, and stopped itself
        wait_for(lambda: not _alive(deaf), 10, "the deaf child to be killed", 0.05)
    finally:
        done.touch()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.proc.pid, signal.SIGKILL)
        service.proc.wait(10)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped by no one here, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False

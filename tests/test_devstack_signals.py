"""``dispatcher.devstack.stopped_by_signals``: which signals it takes over, and what it leaves."""

import signal
import threading

import pytest

from dispatcher.devstack import Stopped, stopped_by_signals, until_stopped


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

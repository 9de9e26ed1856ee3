"""``toolfan check``: whether this process's configuration works, before any work meets it.

A worker with a refused key or a wrong URL used to take every batch it met with it. Now
``toolfan worker`` and ``toolfan poll`` run these checks at start and refuse to start with
one line naming the setting, and ``toolfan check`` runs them on demand. Each check says
what it found; only a finding about a setting stops a start. An API that answers 5xx or
not at all is reported but does not: that is the API's moment, not a wrong setting, and the
work waits for it anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
import redis
from kombu import Connection
from kombu.utils.url import maybe_sanitize_url

from dispatcher.client import AgentsClient
from dispatcher.errors import (
    APIError,
    ConfigurationError,
    NotFoundError,
    RetryableAPIError,
)
from dispatcher.retry import RetryPolicy
from handlers.errors import ToolfanError

#: Seconds each service gets to answer.
CHECK_TIMEOUT = 5


@dataclass(frozen=True)
class Finding:
    """What one check found.

    Attributes:
        subject: What was checked (``redis``, ``broker``, ``api``, ``settings``).
        ok: Whether it passed.
        message: The line to print: where it looked, or what is wrong.
        fatal: Whether this stops a worker or poller from starting.
        setting: The environment variable to fix, when one is to blame.
    """

    subject: str
    ok: bool
    message: str
    fatal: bool = False
    setting: str | None = None

    def line(self) -> str:
        """The finding as one line of output."""
        if self.ok:
            return f"{self.subject:<8} ok     {self.message}"
        where = f"{self.setting}: " if self.setting else ""
        kind = "error" if self.fatal else "warn"
        return f"{self.subject:<8} {kind:<6} {where}{self.message}"


def check_settings() -> list[Finding]:
    """The settings and the tool modules load (and with them the Celery app)."""
    try:
        from tasks.metrics import port_from_env
        from tasks.settings import get_settings, load_registry

        settings = get_settings()
        port_from_env()
        tools = len(load_registry())
    except ToolfanError as exc:
        text = str(exc)
        setting, _, rest = text.partition(": ")
        if text.startswith("TOOLFAN_") and rest:
            return [Finding("settings", False, rest, True, setting)]
        return [Finding("settings", False, text, True, "TOOLFAN_HANDLERS")]
    return [Finding("settings", True, f"{tools} tool(s) from {', '.join(settings.handlers)}")]


def check_sources(names: tuple[str, ...] = ("agents",)) -> Finding:
    """The named sources are installed where the engine looks for them (entry points).

    A checkout whose package metadata predates a source (``pip install -e .`` not rerun)
    would otherwise start and then fail every delivery of that source.
    """
    from tasks import sources

    try:
        found = [sources.get(name).name for name in names]
    except (sources.UnknownSource, ImportError) as exc:
        message = f"{exc}; reinstall toolfan (pip install .) so its entry points are current"
        return Finding("sources", False, message, True)
    return Finding("sources", True, ", ".join(found))


def check_redis(url: str) -> Finding:
    """The ledger's Redis answers a PING."""
    shown = maybe_sanitize_url(url)
    client = redis.Redis.from_url(url, socket_timeout=CHECK_TIMEOUT, socket_connect_timeout=3)
    try:
        client.ping()
    except (redis.RedisError, ValueError) as exc:
        return Finding(
            "redis", False, f"{shown} does not answer ({exc})", True, "TOOLFAN_REDIS_URL"
        )
    finally:
        client.close()
    return Finding("redis", True, shown)


def check_broker(url: str) -> Finding:
    """The broker accepts a connection."""
    shown = maybe_sanitize_url(url)
    setting = "TOOLFAN_BROKER_URL"
    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT)
    except Exception as exc:  # kombu raises many kinds; any means "no broker"
        return Finding("broker", False, f"{shown} does not answer ({exc})", True, setting)
    return Finding("broker", True, shown)


def _quick_client() -> AgentsClient:
    """A client that asks once: a start must not wait a minute for an API that is down."""
    timeout = httpx.Timeout(float(CHECK_TIMEOUT), connect=3.0)
    return AgentsClient(retry=RetryPolicy(max_attempts=1), timeout=timeout)


def check_api(make_client: Callable[[], AgentsClient] = _quick_client) -> Finding:
    """The base URL is usable, a key is set, and one cheap authenticated request works."""
    try:
        client = make_client()
    except ConfigurationError as exc:
        return Finding("api", False, exc.message, True, exc.setting)
    try:
        client.check_access()
    except ConfigurationError as exc:
        return Finding("api", False, exc.message, True, exc.setting)
    except NotFoundError as exc:
        message = f"{exc.message}: this URL serves no sessions endpoint"
        return Finding("api", False, message, True, "OPENAI_BASE_URL")
    except RetryableAPIError as exc:
        return Finding("api", False, f"no usable answer yet ({exc.message})", False)
    except APIError as exc:
        return Finding("api", False, exc.message, True, "OPENAI_BASE_URL")
    finally:
        client.close()
    return Finding("api", True, f"{client.base_url} accepted the key")


def check_runs_api() -> Finding:
    """The Assistants service is configured and one cheap authenticated request works."""
    from dispatcher.sources.assistants_client import AssistantsClient
    from dispatcher.sources.assistants_config import load_config

    try:
        client = AssistantsClient(load_config(), retry=RetryPolicy(max_attempts=1))
    except ConfigurationError as exc:
        return Finding("runs api", False, exc.message, True, exc.setting)
    try:
        client.check_access()
    except ConfigurationError as exc:
        return Finding("runs api", False, exc.message, True, exc.setting)
    except RetryableAPIError as exc:
        return Finding("runs api", False, f"no usable answer yet ({exc.message})", False)
    except APIError as exc:
        return Finding("runs api", False, exc.message, True, client.config.url_setting)
    finally:
        client.close()
    flavour = client.config.flavour.value
    return Finding("runs api", True, f"{client.base_url} ({flavour}) accepted the credential")


def run_checks(*, api: bool = True) -> list[Finding]:
    """Every check in order; later ones are skipped once the settings do not load."""
    findings = check_settings()
    if not findings[0].ok:
        return findings
    from dispatcher.pollers import UnknownSourceSetting, source_names
    from tasks.settings import get_settings

    settings = get_settings()
    try:
        names = source_names(settings.sources)
    except UnknownSourceSetting as exc:
        return [*findings, Finding("settings", False, str(exc), True)]
    findings += [check_redis(settings.redis_url), check_broker(settings.broker)]
    if api and "agents" in names:
        findings.append(check_api())
    if api and "assistants" in names:
        findings.append(check_runs_api())
    findings.append(check_sources(names))
    return findings


def refusal(findings: list[Finding]) -> str | None:
    """The one line a start is refused with, or None when nothing fatal was found."""
    fatal = [f for f in findings if f.fatal]
    if not fatal:
        return None
    first = fatal[0]
    where = f"{first.setting}: " if first.setting else ""
    return f"toolfan: cannot start: {where}{first.message}"

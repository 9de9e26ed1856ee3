"""One ``Settings`` object, read from ``TOOLFAN_*`` environment variables.

Every process builds the same settings from the same environment, so the worker, the
poller and the CLI agree on Redis, the broker and the tool modules without sharing files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from handlers.errors import ToolfanError
from handlers.limits import Limits
from handlers.registry import Registry, registry
from tasks.urls import broker_url_problem, redis_url_problem

_PREFIX = "TOOLFAN_"
#: The longest wait or timeout a setting may ask for: far past any sane value, and well
#: inside what a thread's wait (about 292 years of nanoseconds) and Redis's EXPIRE take.
_YEAR = 365 * 86_400
#: The longest time-to-live of what toolfan keeps in Redis or the broker.
_TEN_YEARS = 10 * _YEAR
#: Seconds the intake remembers a webhook-id by default: the platform retries for up to 72 h.
WEBHOOK_DEDUP_TTL = 72 * 3600
#: Bytes of deliveries not yet verified the webhook intake holds at once (64 MiB).
WEBHOOK_MAX_PENDING_BYTES = 64 << 20


def _seconds(default: float | None, description: str, *, zero: bool = False) -> Any:
    """A setting in seconds: above 0 (or from 0, with ``zero``), and at most a year."""
    if zero:
        return Field(default, ge=0, le=_YEAR, description=description)
    return Field(default, gt=0, le=_YEAR, description=description)


class SettingsError(ToolfanError):
    """An environment variable holds a value toolfan cannot use."""


class Settings(BaseModel):
    """toolfan's configuration; each field is read from ``TOOLFAN_<FIELD>``."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", protected_namespaces=(), allow_inf_nan=False
    )

    redis_url: str = "redis://localhost:6379/0"
    broker_url: str | None = Field(None, description="defaults to redis_url")
    handlers: tuple[str, ...] = ("handlers.examples",)
    ledger_ttl: int = Field(
        7 * 86400, gt=0, le=_TEN_YEARS, description="seconds a call record is kept"
    )
    visibility_timeout: int = Field(
        3600, gt=0, le=_TEN_YEARS, description="Redis broker redelivery delay"
    )
    result_expires: int = Field(
        86400, gt=0, le=_TEN_YEARS, description="seconds Celery keeps task results"
    )
    time_limit_grace: float = _seconds(30.0, "added to a tool's hard limit", zero=True)
    queue_budget: float = _seconds(
        300.0,
        "seconds a call may wait in its queue; with the longest tool "
        "timeout it makes a session's claim lease",
    )
    max_attempts: int = Field(3, ge=1, le=1000, description="deliveries of a call before giving up")
    action_expiry: float | None = _seconds(
        None,
        "seconds after first dispatch at which the platform expires "
        "a session's pending actions, when it does",
    )
    expiry_margin: float = _seconds(15.0, "answer this long before expiry", zero=True)
    api_timeout: float = _seconds(30.0, "seconds to wait for an API answer")
    poll_interval: float = _seconds(5.0, "seconds between polls (loop, beat)")
    submit_retries: int = Field(10, ge=0, le=1000, description="Celery retries of a failed submit")
    agent_id: str | None = Field(None, description="only poll this agent's sessions")
    session_metadata: dict[str, str] = Field(
        default_factory=dict, description="only poll sessions with these metadata, k=v,k2=v2"
    )
    max_argument_bytes: int = Field(1_048_576, gt=0, description="a call's arguments, as JSON")
    max_depth: int = Field(64, ge=1, le=1000, description="nesting of a call's arguments")
    max_error_chars: int = Field(4_000, ge=100, description="an error message for the model")
    max_image_url_chars: int = Field(2_000_000, gt=0, description="one input_image URL")
    max_content_parts: int = Field(100, gt=0, description="parts of one content array")
    max_content_bytes: int = Field(4_194_304, gt=0, description="one content array, all parts")
    max_batch_bytes: int = Field(16_777_216, ge=65_536, description="one batch of results")
    max_log_chars: int = Field(2_000, ge=100, description="one field of a log line")
    poll_max_pages: int = Field(10_000, gt=0, description="pages one poll pass reads at most")
    poll_max_seconds: float = _seconds(300.0, "seconds one poll pass lists at most")
    heartbeat: float = _seconds(2.0, "seconds between a worker's heartbeats")
    dead_after: float = _seconds(10.0, "seconds without a heartbeat after which a worker is dead")
    sources: tuple[str, ...] = Field(
        ("agents",), description="the sources toolfan poll and beat poll, comma-separated"
    )
    runs_discover: str = Field(
        "watch",
        pattern="^(watch|threads)$",
        description="how runs are found: watched only, or also the recent threads (Foundry)",
    )
    runs_max_threads: int = Field(1000, gt=0, description="threads a discovering pass reads")
    runs_recheck: float = _seconds(
        1.0,
        "seconds a watched run whose phase is in flight rests after its first "
        "read (0: read every pass)",
        zero=True,
    )
    runs_recheck_max: float = _seconds(
        8.0,
        "the longest rest of a watched run whose phase stays in flight (each "
        "read under the same claim doubles it from TOOLFAN_RUNS_RECHECK), and of a run "
        "in a model turn whose answer asked for one (openai-poll-after-ms)",
        zero=True,
    )
    runs_readers: int = Field(
        8,
        ge=1,
        le=20,
        description="watched runs a runs poller reads at once",
    )
    model: str = Field(
        "gpt-4.1-mini", min_length=1, description="the model a tool loop calls by default"
    )
    model_timeout: float = _seconds(300.0, "seconds one model call may take")
    model_retries: int = Field(
        5, ge=0, le=1000, description="retries of a model call failing briefly"
    )
    webhook_max_bytes: int = Field(
        1_048_576, ge=1024, description="bytes of one webhook delivery the intake reads at most"
    )
    webhook_max_pending_bytes: int = Field(
        WEBHOOK_MAX_PENDING_BYTES,
        ge=1024,
        description="bytes of webhook deliveries not yet verified the intake holds at once, "
        "every connection together (over it: 503)",
    )
    webhook_dedup_ttl: int = Field(
        WEBHOOK_DEDUP_TTL,
        gt=0,
        le=_TEN_YEARS,
        description="seconds the intake remembers a delivery's webhook-id, so that a repeat "
        "of it does nothing",
    )
    intake_token: SecretStr | None = Field(
        None, description="bearer token of the intake server's operator endpoints"
    )
    max_memory_per_child: int = Field(
        1024, ge=0, description="MiB a prefork pool process may reach before it is recycled"
    )
    worker_concurrency: int = Field(
        0,
        ge=0,
        le=10_000,
        description="pool processes (threads, greenlets) of a worker started without -c; "
        "0: twice the CPUs it may use",
    )
    control_threads: int = Field(
        64,
        ge=0,
        le=1000,
        description="threads of the control worker a toolfan worker without -Q starts "
        "beside its prefork pool; 0: one worker on every queue",
    )
    policy: str | None = Field(
        None, description="module:function deciding every call of a tool without authorize="
    )
    approval_timeout: float = _seconds(
        600.0, "seconds a call waits for its approval before it times out"
    )
    enforce_agent_tools: bool = Field(
        True, description="refuse calls to functions the session's agent does not declare"
    )
    task_events: bool = Field(
        False, description="workers send task events from their start, Flower or not"
    )

    @field_validator("handlers", "sources", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("session_metadata", mode="before")
    @classmethod
    def _pairs(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        pairs = [p.strip() for p in value.split(",") if p.strip()]
        if any("=" not in p for p in pairs):
            raise ValueError("expected k=v pairs separated by commas, e.g. team=billing,env=prod")
        return dict(p.split("=", 1) for p in pairs)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        problem = redis_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        problem = broker_url_problem(value) if value else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("agent_id", "action_expiry", "intake_token", "policy", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return value or None

    @field_validator("intake_token", mode="before")
    @classmethod
    def _usable_token(cls, value: Any) -> Any:
        """The token without the spaces around it; refused if nothing else is left.

        A token read from a file often ends in a newline, and no ``Authorization`` header
        can carry spaces around a token. A token of spaces alone is refused, not taken:
        anyone could guess it on the approval page's sign-in form.
        """
        if not isinstance(value, str) or not value:
            return value  # unset
        token = value.strip()
        if not token:
            raise ValueError("is only whitespace; set a long random token, or leave it empty")
        if not token.isprintable():
            raise ValueError("has control characters, which no Authorization header carries")
        return token

    @model_validator(mode="after")
    def _beats_before_death(self) -> Settings:
        if self.dead_after < 2 * self.heartbeat:
            raise ValueError(
                "TOOLFAN_DEAD_AFTER: must be at least twice TOOLFAN_HEARTBEAT, or a live "
                "worker missing one beat would look dead"
            )
        return self

    @model_validator(mode="after")
    def _room_for_a_delivery(self) -> Settings:
        if self.webhook_max_pending_bytes < self.webhook_max_bytes:
            raise ValueError(
                "TOOLFAN_WEBHOOK_MAX_PENDING_BYTES: must be at least TOOLFAN_WEBHOOK_MAX_BYTES, "
                "or a delivery of the largest size could never be read"
            )
        return self

    @property
    def limits(self) -> Limits:
        """The bounds on one call's arguments and result."""
        return Limits(
            argument_bytes=self.max_argument_bytes,
            depth=self.max_depth,
            error_chars=self.max_error_chars,
            image_url_chars=self.max_image_url_chars,
            content_parts=self.max_content_parts,
            content_bytes=self.max_content_bytes,
        )

    @property
    def broker(self) -> str:
        """The broker URL: ``TOOLFAN_BROKER_URL``, else the Redis URL."""
        return self.broker_url or self.redis_url

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from an environment mapping (default: ``os.environ``).

        Raises:
            SettingsError: naming the variable and what is wrong with it.
        """
        env = os.environ if environ is None else environ
        values = {
            name: env[_PREFIX + name.upper()]
            for name in cls.model_fields
            if _PREFIX + name.upper() in env
        }
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            error = exc.errors()[0]
        # Raised outside the handler, so no traceback chains pydantic's error, which
        # quotes the value (a URL's password, say).
        message = error["msg"].removeprefix("Value error, ")
        if not error["loc"]:  # a rule across settings names its variables itself
            raise SettingsError(message)
        raise SettingsError(f"{_PREFIX}{str(error['loc'][0]).upper()}: {message}")


@cache
def get_settings() -> Settings:
    """The settings of this process, read once."""
    return Settings.from_env()


@cache
def load_registry() -> Registry:
    """The process-wide registry, filled from the ``TOOLFAN_HANDLERS`` modules once."""
    registry.load(get_settings().handlers)
    return registry

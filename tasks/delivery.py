"""What the engine needs to hear from a source about one batch it tried to deliver.

A source (:mod:`tasks.sources`) speaks its own protocol and has its own client errors; the
engine speaks only this vocabulary, so it can decide every case the same way for every
protocol:

* :class:`Delivered`: the batch was taken (or had been already): its calls are submitted;
* :class:`RetryLater`: not taken yet; send the same batch again later, with the same key;
* :class:`Misconfigured`: toolfan's settings are wrong (a key, a URL): no verdict on the
  batch, which waits until an operator fixes the setting;
* :class:`Refused`: the batch as it is will never be taken. When the refusal names one
  result (``item``), that result alone is replaced by an error and the batch goes again;
  otherwise the batch is abandoned.
"""

from __future__ import annotations

from dataclasses import dataclass

from handlers.errors import ToolfanError


@dataclass(frozen=True)
class Delivered:
    """A batch the remote side took.

    Attributes:
        key: The delivery's idempotency key (what a resend of the same batch carries), or
            the protocol's own identity of the delivery when it takes no key.
        status: How it was taken, for metrics: an HTTP status, or a word.
        count: How many results it carried.
    """

    key: str
    status: str
    count: int


class DeliveryError(ToolfanError):
    """A batch was not delivered.

    Attributes:
        message: What went wrong, fit for a log line (no secret in it).
        status: The attempt's outcome for metrics: an HTTP status, ``retry`` or ``final``.
        key: The key the attempt carried, if it got that far.
    """

    def __init__(self, message: str, *, status: str = "final", key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.key = key


class RetryLater(DeliveryError):
    """The batch was not taken yet: the same batch, with the same key, may be taken later."""


class Misconfigured(DeliveryError):
    """The remote side cannot be used with toolfan's settings; the batch is kept.

    Attributes:
        setting: The environment variable an operator should check.
        kind: What kind of configuration error it was (a metric label).
    """

    def __init__(
        self,
        message: str,
        *,
        setting: str = "",
        kind: str = "Misconfigured",
        status: str = "final",
        key: str = "",
    ) -> None:
        super().__init__(message, status=status, key=key)
        self.setting = setting
        self.kind = kind


class Refused(DeliveryError):
    """The batch as it is will never be taken.

    Attributes:
        item: The index, in the results given to the source, of the one result the refusal
            names, or None when it names none (then the batch is abandoned).
    """

    def __init__(
        self, message: str, *, item: int | None = None, status: str = "final", key: str = ""
    ) -> None:
        super().__init__(message, status=status, key=key)
        self.item = item

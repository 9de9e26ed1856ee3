"""Failures of the Agents API client, split by what the caller should do next.

The split that matters is retryable versus final: a retryable failure may succeed if the
same request (with the same ``Idempotency-Key``) is sent again later; a final one will fail
the same way until something changes. The client retries the retryable ones itself and
raises :class:`RetriesExhausted` (still retryable: a later attempt may work) once its budget
is spent::

    ToolfanError                          handlers.errors: root of toolfan's own failures
     └── APIError                         the remote API answered badly or not at all
          ├── RetryableAPIError           try again later, same request, same key
          │    ├── RateLimitError         429 (Retry-After honoured)
          │    ├── ServerError            5xx, 408
          │    ├── APIConnectionError     no answer: refused, reset, dropped (lost 202)
          │    │    └── APITimeoutError   no answer in time
          │    └── RetriesExhausted       the client's retry budget ran out; .last_error
          ├── ConfigurationError          toolfan's own settings are wrong: fix them, the work waits
          │    ├── AuthenticationError    401, or no key configured
          │    ├── PermissionDeniedError  403
          │    └── EndpointError          unusable base URL: bad scheme, unknown host, TLS failure
          └── FinalAPIError               retrying the same request cannot help
               ├── BadRequestError        400, 422: the request itself is wrong (.param says where)
               ├── NotFoundError          404: no such session, or (probe) a wrong base URL
               ├── ConflictError          409: e.g. the call is no longer pending
               └── UnexpectedResponseError a 2xx answer toolfan cannot parse

A configuration error is no verdict on a batch: the batch it met stays retryable, and
comes back once an operator fixed the setting. Only a refusal about a batch's own content
(a final error) abandons it.

No message ever contains the API key: messages are built from the status, the error code,
the server's message (with the key scrubbed) and the base URL.
"""

from __future__ import annotations

from handlers.errors import ToolfanError


class APIError(ToolfanError):
    """The remote API answered with an error, an unusable answer, or not at all.

    Attributes:
        message: What went wrong, fit for a log line.
        status_code: The HTTP status, or ``None`` when there was no answer.
        code: The API's machine-readable error code, if it sent one.
        request_id: The API's ``x-request-id``, to quote to its support.
        param: The request parameter the API named as the problem, e.g. ``events[3].output``.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.request_id = request_id
        self.param = param


class RetryableAPIError(APIError):
    """A transient failure: the same request may succeed later."""


class RateLimitError(RetryableAPIError):
    """429: the API asks to slow down.

    Attributes:
        retry_after: Seconds the API asked to wait, if it said.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, status_code=429, code=code, request_id=request_id)
        self.retry_after = retry_after


class ServerError(RetryableAPIError):
    """5xx (or 408): the API failed to handle a request that may well be fine."""


class APIConnectionError(RetryableAPIError):
    """No answer: the connection failed or dropped.

    The request may or may not have been applied, so only an idempotent retry (same key)
    is safe.
    """


class APITimeoutError(APIConnectionError):
    """No answer within the configured timeout."""


class RetriesExhausted(RetryableAPIError):
    """Every attempt failed with a retryable error, or the time budget ran out.

    Attributes:
        last_error: The failure of the last attempt (also the ``__cause__``).
        attempts: How many requests were sent.
    """

    def __init__(self, message: str, *, last_error: RetryableAPIError, attempts: int) -> None:
        super().__init__(
            message,
            status_code=last_error.status_code,
            code=last_error.code,
            request_id=last_error.request_id,
        )
        self.last_error = last_error
        self.attempts = attempts


class ConfigurationError(APIError):
    """The API cannot be used with toolfan's settings: a key, a URL, a certificate.

    Every request fails the same way until an operator fixes the setting, whatever it
    carries, so this says nothing about the request: work that met it is kept and retried.

    Attributes:
        setting: The environment variable to check.
    """

    setting = "OPENAI_BASE_URL"


class AuthenticationError(ConfigurationError):
    """401: the API key was missing or refused."""

    setting = "OPENAI_API_KEY"


class PermissionDeniedError(ConfigurationError):
    """403: the key is valid but may not do this."""

    setting = "OPENAI_API_KEY"


class EndpointError(ConfigurationError):
    """The base URL is unusable: not http(s), a host DNS does not know, a TLS failure."""


class FinalAPIError(APIError):
    """A failure that repeats for the same request: fix the request, key or state first."""


class BadRequestError(FinalAPIError):
    """400/422: the API rejected the request as malformed."""


class NotFoundError(FinalAPIError):
    """404: no such session (or wrong base URL)."""


class ConflictError(FinalAPIError):
    """409: the request conflicts with the session's state (e.g. not pending any more)."""


class UnexpectedResponseError(FinalAPIError):
    """A successful status whose body is not what the API documents."""

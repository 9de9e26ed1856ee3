"""Exceptions of toolfan, one root with a subtree per layer.

Failures of toolfan itself derive from :class:`ToolfanError`; each package adds its
own branch next to the layer that raises it::

    ToolfanError
     ├── RegistryError            handlers: a tool declared wrongly, a module that won't load
     ├── LedgerError              tasks: the Redis ledger refused or lost an update
     └── APIError                 dispatcher: the remote API answered badly (retryable or final)

:class:`ToolError` is deliberately *not* part of that tree: it is a signal that tool code
raises on purpose to tell the model something ("no customer with that id"), not a failure of
toolfan, so its message reaches the model verbatim and nothing is logged as an error.
"""

from __future__ import annotations


class ToolfanError(Exception):
    """Root of every error raised by toolfan itself."""


class RegistryError(ToolfanError):
    """A tool is declared in a way toolfan cannot serve (bad name, signature or options)."""


class ToolError(Exception):
    """Raised by tool code to fail a call with a message meant for the model.

    The message becomes the ``error`` of a ``success: false`` result unchanged, so write it
    for the model: say what was wrong and what would work instead.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

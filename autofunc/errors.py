"""User-facing error types.

Every error autofunc raises for bad input is an ``AutofuncError`` that names the op and, where
one is at fault, the argument. Internal invariants use ``AssertionError`` instead.
"""

from __future__ import annotations

__all__ = [
    "AutofuncError",
    "GraphError",
    "MalformedViewsError",
    "UnsupportedCallError",
    "UnsupportedOpError",
]


class AutofuncError(ValueError):
    """Base class of the errors autofunc raises for bad user input."""


class GraphError(AutofuncError):
    """A graph handed to :func:`autofunc.reinplace` that it cannot analyse (no fake values)."""


class MalformedViewsError(AutofuncError):
    """A v2 HOP call whose ``_views`` does not decode against its op's schema."""


class _OpError(AutofuncError):
    """An error about one op and, where one is at fault, one of its arguments."""

    _lead = "autofunc cannot functionalize "

    def __init__(self, op: str, reason: str, *, arg: str | None = None, hint: str = ""):
        self.op = op
        self.arg = arg
        self.reason = reason
        where = f"argument '{arg}' of " if arg is not None else ""
        msg = f"{self._lead}{where}op {op}: {reason}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class UnsupportedOpError(_OpError, TypeError):
    """An op's schema is outside what autofunc can functionalize soundly.

    Raised by :func:`autofunc.register` at registration time, before any program is traced.
    """


class UnsupportedCallError(_OpError):
    """One call of a registered op that autofunc cannot functionalize soundly where it is
    traced (the op itself is supported). Raised while tracing, naming the op and the argument.
    """

    _lead = "autofunc cannot functionalize this call: "

"""autofunc's loggers: each record reaches the user once, whatever handlers the host installs.

Note [Each record once]
``TORCH_LOGS=autofunc`` (or ``autofunc.inductor``, ``+autofunc``) makes PyTorch put its own
handler on that logger. PyTorch turns ``propagate`` off on the loggers it registers, but only on
its next ``_init_logs``: a module name read from the environment when torch is imported is
registered after the reset, so its logger keeps propagating. A host program that configures the
root logger (``logging.basicConfig``, or any ``logging.info`` call made before one, as vLLM's MoE
path does) then prints every autofunc record a second time, as ``INFO:autofunc.inductor:...``.

Every autofunc logger comes from :func:`get_logger`, which gives it a filter that runs when one
of its records is made, before any handler: walking up the autofunc loggers, the first one that
carries a PyTorch handler stops propagating, so the record reaches PyTorch's handler and not the
root's. A logger this filter stopped propagates again once PyTorch's handler is gone. Without
``TORCH_LOGS`` naming autofunc nothing is changed: the host's handlers print the record, once.
Handlers the host puts on autofunc's loggers itself are its own choice and stay.
"""

from __future__ import annotations

import logging

__all__ = ["get_logger"]

_ROOT = "autofunc"
_stopped: set[str] = set()  # loggers whose propagation this module turned off


def _is_torch_handler(handler: logging.Handler) -> bool:
    try:
        from torch._logging._internal import _is_torch_handler as is_torch
    except Exception:  # a torch without it: no PyTorch handler to tell apart
        return False
    return bool(is_torch(handler))


def route(logger: logging.Logger) -> None:
    """Let ``logger``'s records reach PyTorch's handler or the host's, not both (Note [Each
    record once])."""
    current: logging.Logger | None = logger
    while current is not None and (current.name == _ROOT or current.name.startswith(_ROOT + ".")):
        if any(_is_torch_handler(h) for h in current.handlers):
            if current.propagate:
                current.propagate = False
                _stopped.add(current.name)
            return
        if current.name in _stopped:  # PyTorch's handler is gone: propagate as before
            _stopped.discard(current.name)
            current.propagate = True
        if not current.propagate:
            return
        current = current.parent


class _Once(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        route(logging.getLogger(record.name))
        return True


_ONCE = _Once()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` for one of autofunc's loggers, each record of which reaches
    the user once (Note [Each record once])."""
    logger = logging.getLogger(name)
    if _ONCE not in logger.filters:
        logger.addFilter(_ONCE)
    return logger

"""Facts about an FX node's target (an op, a function), computed once per target object.

Note [Facts per target]
The pass asks questions of every node's target that only the target decides: is it an op
Inductor may evaluate late, what name does FX give its nodes. An ``OpOverload`` answers in
Python (its ``__hash__``, ``namespace`` and ``tags`` run Python code), and the pass asks for
each node, sometimes several times. :func:`per_target` keeps each answer per target object,
keyed by its ``id``: the table also holds the target, so no other object can take that ``id``
while the entry lives, and an op defined again (a reloaded library) is a new object, asked
afresh. Targets are ops and functions, a bounded set per process; call
``per_target`` only on a call node's target (a placeholder's target is its name).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["per_target"]

T = TypeVar("T")


def per_target(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """``fn`` (a pure function of a target) answered once per target object. The wrapper's
    ``memo`` (``id(target) -> (target, answer)``) lets a loop over every node of a graph read a
    known answer without a call."""
    memo: dict[int, tuple[Any, T]] = {}

    @functools.wraps(fn)
    def lookup(target: Any) -> T:
        known = memo.get(id(target))
        if known is None:  # holding the target keeps its id from being reused
            known = memo[id(target)] = (target, fn(target))
        return known[1]

    lookup.memo = memo  # type: ignore[attr-defined] - for a hot loop: ``memo.get(id(t))``
    return lookup

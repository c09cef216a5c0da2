"""Guard-free facts about sizes, strides and offsets that may be symbolic (``torch.SymInt``,
backed or unbacked): the one home of autofunc's symbolic-size helpers.

Every function here decides only what is statically known and never installs a guard, so it is
safe on data-dependent sizes (``nonzero()``, ``.item()``); an undecided question gets the answer
that keeps the caller conservative (Note [Undecided geometry]). Imports torch only.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import torch


__all__ = [
    "Arith",
    "PY_ARITH",
    "cached_when_static",
    "contiguous_or_false",
    "copy_extent",
    "is_plain",
    "is_symbolic",
    "known",
    "nbytes_hint",
    "plain_fields",
    "span_extent",
]

# Note [Undecided geometry]
# With unbacked sizes (``u0`` from ``nonzero()``) or a dynamic slice whose length may be 0, a
# question such as "is this tensor contiguous?" or "is this size at least 1?" may have no answer
# at compile time, and asking it the ordinary way (``bool(...)``) raises
# GuardOnDataDependentSymNode or silently specializes the graph. autofunc never asks it that
# way: each decision takes the branch that is right whatever the answer (keep a clone, copy the
# storage span, emit an ``as_strided``, assume overlap), at the cost of some speed.


def known(cond: Any) -> bool:
    """True iff ``cond`` (a bool or SymBool) is provably true; never installs a guard."""
    if isinstance(cond, bool):
        return cond
    # Imported here: it loads sympy (about 0.5 s), which a SymBool has loaded already.
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(cond))


_F = TypeVar("_F", bound=Callable[..., Any])


def _static(x: Any) -> bool:
    """Whether ``x`` is built from ints, bools, ``None`` and tuples only (hashable, no SymInt)."""
    stack = [x]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is tuple:
            stack.extend(v)
        elif not (kind is int or kind is bool or v is None):
            return False
    return True


def cached_when_static(maxsize: int) -> Callable[[_F], _F]:
    """Memoize a pure function of geometry on the calls whose arguments are all static.

    Note [Memoized geometry]
    The pass asks the same geometric questions once per layer (the region a view covers, the
    chain that regenerates it), and a decoder repeats its layers. A call whose arguments are ints
    (in tuples) is answered from a bounded LRU table; a call with a SymInt (not hashable, and its
    answer may depend on the shape environment) is computed every time. The function must be
    pure and return an immutable value.
    """

    def wrap(fn: _F) -> _F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            return cached(*args) if _static(args) else fn(*args)

        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def is_symbolic(x: Any) -> bool:
    """Whether ``x`` is a SymInt that is not a constant."""
    return isinstance(x, torch.SymInt) and x.node.maybe_as_int() is None


def is_plain(v: Any) -> bool:
    """Whether ``v`` is a plain int, a tuple of plain ints, or a dtype: a value that holds no
    SymInt (not even a constant one) nor a graph node, so it hashes and compares by value."""
    if isinstance(v, tuple):
        return all(type(e) is int for e in v)
    return type(v) is int or isinstance(v, torch.dtype)


def plain_fields(x: Any) -> bool:
    """Whether every field of ``x`` (a view step, or any object with a ``__dict__``) is
    :func:`is_plain`: a value that hashes and compares by its numbers alone."""
    return all(is_plain(v) for v in vars(x).values())


def contiguous_or_false(t: torch.Tensor) -> bool:
    """``t.is_contiguous()`` when that is statically known, else ``False``.

    Not ``torch._prims_common.is_contiguous_or_false``: that one answers a question on backed
    sizes with a guard (``guard_or_false``), which would specialize the user's graph from inside
    a HOP's fake rule or the pass. This test installs no guard on any torch version.
    """
    if not any(is_symbolic(x) for x in (*t.shape, *t.stride())):
        return t.is_contiguous()
    if any(known(n == 0) for n in t.shape):
        return True
    expected: Any = 1
    for n, st in reversed(list(zip(t.shape, t.stride()))):
        if not (known(n == 1) or known(st == expected)):
            return False
        expected = expected * n
    return True


def overlaps_itself(t: torch.Tensor) -> bool:
    """Whether two of ``t``'s elements are statically known to share a memory location: a
    dimension of stride 0 and more than one element (an ``expand``). The test PyTorch's in-place
    ops apply before they refuse to write; it installs no guard."""
    return any(known(st == 0) and known(n > 1) for n, st in zip(t.shape, t.stride()))


class Arith(Protocol):
    """Integer arithmetic over some representation of ints (values, or FX nodes)."""

    def value(self, x: Any) -> Any:
        """The int or SymInt ``x`` stands for (used to decide, never emitted)."""

    def add(self, a: Any, b: Any) -> Any: ...

    def mul(self, a: Any, b: Any) -> Any: ...

    def min(self, a: Any, b: Any) -> Any: ...


class _PyArith:
    """Arith on ints and SymInts themselves."""

    def value(self, x: Any) -> Any:
        return x

    add = staticmethod(operator.add)
    mul = staticmethod(operator.mul)

    @staticmethod
    def min(a: Any, b: Any) -> Any:
        return torch.sym_min(a, b)


PY_ARITH: Arith = _PyArith()


def span_extent(size: Sequence[Any], stride: Sequence[Any], arith: Arith = PY_ARITH) -> Any:
    """How many storage elements a non-empty view spans, from its first element to its last:
    ``1 + sum((size[d] - 1) * stride[d])`` (strides are never negative).

    For an empty view the formula means nothing (it may be negative, or run past the storage);
    an upper bound of the region a view covers may still use it as is, since an empty view
    covers nothing. What allocates or views that many elements uses :func:`copy_extent`.

    Args:
        size, stride: the view's geometry, in ``arith``'s representation.
        arith: how to compute (``PY_ARITH`` on values; ``passes.emit`` emits graph nodes).
    """
    extent: Any = 1
    for n, st in zip(size, stride):
        extent = arith.add(extent, arith.mul(arith.add(n, -1), st))
    return extent


def copy_extent(
    size: Sequence[Any], stride: Sequence[Any], arith: Arith = PY_ARITH, *, start: Any = 0
) -> Any:
    """How many elements a flat view must hold to contain a view that begins ``start`` elements
    into it: ``0`` for an empty view (whatever ``start``), else ``start + span_extent``.

    A size that may be 0 (not statically at least 1) multiplies the result by
    ``min(1, size...)``, a branch-free 0 or 1, instead of asking (Note [Undecided geometry]).
    """
    values = [arith.value(n) for n in size]
    if any(known(v == 0) for v in values):
        return 0
    extent = arith.add(start, span_extent(size, stride, arith))
    maybe_empty = [n for n, v in zip(size, values) if not known(v >= 1)]
    if not maybe_empty:
        return extent
    nonempty: Any = 1
    for n in maybe_empty:
        nonempty = arith.min(nonempty, n)
    return arith.mul(extent, nonempty)


def nbytes_hint(val: Any) -> int:
    """The bytes of a tensor value, its size hint where symbolic (never a guard); 0 for
    anything that is no tensor."""
    if not isinstance(val, torch.Tensor):
        return 0
    n = val.numel() * val.element_size()
    return int(n) if isinstance(n, int) else int(n.node.hint or 0)

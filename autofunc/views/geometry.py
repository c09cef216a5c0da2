"""Guard-free arithmetic on view geometries: ``(size, stride, storage_offset)`` triples.

Sizes, strides and offsets are ints or ``torch.SymInt``; every decision on a symbolic value is a
``statically_known_true`` one (``symbolic.known``), so nothing here installs a guard. Also the
rescaling of a geometry by ``view(dtype)`` (Note [Dtype views] in steps.py). Imports only
``autofunc.symbolic``: the rest of ``autofunc.views`` builds on this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..symbolic import known as _known

__all__ = [
    "Geom",
    "IntLike",
    "as_int",
    "coalesced",
    "dtype_view_geometry",
    "hint",
    "rescale",
    "simplify",
    "split_at",
    "view_strides",
]

IntLike = int | torch.SymInt


class Geom(NamedTuple):
    """A view geometry, in elements of the tensor's dtype."""

    size: tuple[IntLike, ...]
    stride: tuple[IntLike, ...]
    offset: IntLike


def as_int(x) -> int | None:
    """``x`` as a Python int when it is one (or a constant SymInt), else ``None``."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        return x.node.maybe_as_int()
    return None


def hint(x: IntLike) -> int | None:
    """The example value of ``x`` (steers searches only; never used without verification)."""
    if isinstance(x, int):
        return x
    node = x.node
    return node.hint if node.has_hint() else None


def simplify(x: IntLike) -> IntLike:
    """Turn constant SymInts into plain ints (keeps chains and wire tuples readable)."""
    value = as_int(x)
    return x if value is None else value


def dtype_view_geometry(
    size: Sequence[IntLike], stride: Sequence[IntLike], offset: IntLike, old: int, new: int
) -> tuple[tuple, tuple, IntLike] | None:
    """The geometry ``view(dtype)`` gives a tensor, in elements of ``new`` bytes.

    Args:
        size: Sizes of the tensor.
        stride: Its strides, in elements of ``old`` bytes.
        offset: Its storage offset, in elements of ``old`` bytes.
        old: Its element size in bytes.
        new: The element size of the dtype it is viewed as.

    Returns:
        ``(size, stride, offset)``, or ``None`` where ATen would refuse the dtype view or it
        cannot be proven allowed without a guard (Note [Dtype views]).
    """
    geom = rescale(Geom(tuple(size), tuple(stride), offset), old, new)
    return None if geom is None else tuple(geom)


def rescale(geom: Geom, old: int, new: int) -> Geom | None:
    """``geom`` (in elements of ``old`` bytes) as seen by ``view(dtype)`` of ``new`` bytes, or
    ``None`` where ATen would refuse it or it cannot be proven allowed (Note [Dtype views])."""
    if old == new:
        return geom
    if not geom.size or not _known(geom.stride[-1] == 1):
        return None
    size, stride = list(geom.size), list(geom.stride)
    if new < old:
        if old % new:
            return None
        r = old // new
        size[-1] = simplify(size[-1] * r)
        stride = [simplify(s * r) for s in stride[:-1]] + [1]
        return Geom(tuple(size), tuple(stride), simplify(geom.offset * r))
    if new % old:
        return None
    r = new // old
    if not all(_known(x % r == 0) for x in (size[-1], geom.offset, *stride[:-1])):
        return None
    size[-1] = simplify(size[-1] // r)
    stride = [simplify(s // r) for s in stride[:-1]] + [1]
    return Geom(tuple(size), tuple(stride), simplify(geom.offset // r))


def _prod(xs: Sequence[IntLike]) -> IntLike:
    out: IntLike = 1
    for x in xs:
        out = out * x
    return out


def view_strides(
    size: Sequence[IntLike], stride: Sequence[IntLike], shape: Sequence[IntLike]
) -> tuple[IntLike, ...] | None:
    """The strides ``aten.view`` gives a tensor of geometry ``(size, stride)`` viewed as
    ``shape``, or ``None`` where the view is refused or not provably allowed without a guard.

    Note [View steps]
    ``x.view(shape)`` keeps every element where it is and only regroups dims: the old dims are
    cut, innermost first, into runs that are contiguous with each other (a dim joins the run
    inside it when its stride is that run's element count times the run's innermost stride, or
    when it has size 1), and each run must be covered by consecutive new dims whose sizes
    multiply to the run's element count; a new dim of size 1 goes to the run being covered at
    that point. Within a run the new dims get contiguous strides over the run's innermost
    stride. ``View`` steps (views/steps.py) rely on this matching ATen exactly, including the
    strides of size-1 dims (tests/test_views.py compares it with ``Tensor.view``); a tensor
    with no dim views as size-1 dims of stride 1. Tensors with no element are left to ATen
    (``None``): inference never needs them.
    """
    size, stride, shape = tuple(size), tuple(stride), tuple(shape)
    if not all(_known(n >= 1) for n in (*size, *shape)):
        return None
    if not size:
        return (1,) * len(shape) if all(_known(n == 1) for n in shape) else None
    if not _known(_prod(size) == _prod(shape)):
        return None
    out: list[IntLike] = [0] * len(shape)
    j = len(shape) - 1  # the next new dim to place, innermost first
    d = len(size) - 1  # the innermost old dim of the next run
    while d >= 0:
        inner, count = stride[d], size[d]
        while d > 0 and (_known(size[d - 1] == 1) or _known(stride[d - 1] == count * inner)):
            d -= 1
            count = count * size[d]
        placed: IntLike = 1
        while j >= 0 and (not _known(placed == count) or _known(shape[j] == 1)):
            if not _known(placed * shape[j] <= count):
                return None  # a new dim straddles two runs (or cannot be shown not to)
            out[j] = simplify(placed * inner)
            placed = placed * shape[j]
            j -= 1
        if not _known(placed == count):
            return None
        d -= 1
    return tuple(out) if j < 0 else None


def coalesced(geom: Geom) -> Geom:
    """``geom`` with its size-1 dims dropped and each dim merged into the one before it when
    the two are contiguous with each other: the same elements, in the same order, with the
    fewest dims (a region, or the slice a ``View`` step splits: Note [View steps])."""
    size: list[IntLike] = []
    stride: list[IntLike] = []
    for n, st in zip(geom.size, geom.stride):
        if _known(n == 1):
            continue
        if size and _known(stride[-1] == n * st):
            size[-1], stride[-1] = simplify(size[-1] * n), st
        else:
            size.append(n)
            stride.append(st)
    return Geom(tuple(size), tuple(stride), geom.offset)


def split_at(geom: Geom, cuts: Sequence[IntLike]) -> Geom:
    """``geom`` with each int dim split where one of ``cuts`` (int strides) falls strictly
    inside it and divides it evenly: a dim of size 8, stride 16 cut at 64 is ``(2, 4)``, strides
    ``(64, 16)``. Splitting a dim is always a valid ``view``."""
    size: list[IntLike] = []
    stride: list[IntLike] = []
    for n, st in zip(geom.size, geom.stride):
        if not (isinstance(n, int) and isinstance(st, int)) or st <= 0:
            size.append(n)
            stride.append(st)
            continue
        inner = sorted(
            {c for c in cuts if isinstance(c, int) and st < c < n * st and (n * st) % c == 0},
            reverse=True,
        )
        outer = n * st
        for c in inner:
            if outer % c == 0 and c % st == 0:
                size.append(outer // c)
                stride.append(c)
                outer = c
        size.append(outer // st)
        stride.append(st)
    return Geom(tuple(size), tuple(stride), geom.offset)

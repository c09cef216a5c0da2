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

__all__ = ["Geom", "IntLike", "as_int", "dtype_view_geometry", "hint", "rescale", "simplify"]

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

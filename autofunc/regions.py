"""Which elements of a storage a tensor covers, and whether two such regions may overlap.

Pure geometry on (size, stride, storage offset), ints or SymInts, decided only when statically
known (never installing guards); anything undecided counts as overlapping. Used by the HOPs (may
two mutable arguments alias?) and by the alias analysis of the re-inplace pass. Imports
``views`` and ``symbolic`` only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import views
from .symbolic import known as _known
from .symbolic import span_extent

__all__ = [
    "Region",
    "overlaps",
    "region_of",
    "region_of_geometry",
    "is_dense_root",
    "region_of_storage",
    "same_geometry",
    "tensors_may_overlap",
]


@dataclasses.dataclass(frozen=True)
class Region:
    """A part of a version's memory, in elements.

    ``lo``/``hi`` bound it ([lo, hi)); ``box`` (when known) gives, per dim of the version's root
    geometry ``root``, the (start, stop, step) of the indices it covers, which lets two
    interleaved views (``qkv.split`` halves, ``kv[l]`` vs ``kv[l+1]`` rows) be proven disjoint.
    """

    lo: Any
    hi: Any
    root: tuple | None = None
    box: tuple | None = None

    @classmethod
    def everything(cls) -> "Region":
        """Overlaps every region (used when coordinates cannot be related)."""
        return cls(-(2**62), 2**62)


def _all_known_eq(xs: tuple, ys: tuple) -> bool:
    return len(xs) == len(ys) and all(_known(x == y) for x, y in zip(xs, ys))


def _same_root(a: tuple, b: tuple) -> bool:
    return _all_known_eq(a[0], b[0]) and _all_known_eq(a[1], b[1]) and _known(a[2] == b[2])


def _progressions_disjoint(a: tuple, b: tuple) -> bool:
    (a0, a1, sa), (b0, b1, sb) = a, b
    if _known(a1 <= b0) or _known(b1 <= a0) or _known(a1 <= a0) or _known(b1 <= b0):
        return True
    ints = all(isinstance(x, int) for x in (sa, sb, a0, b0))
    if ints and sa == sb and sa > 1:
        return a0 % sa != b0 % sb
    return False


def overlaps(a: Region, b: Region) -> bool:
    """Whether two regions of one memory class may share an element (conservative)."""
    if _known(a.hi <= b.lo) or _known(b.hi <= a.lo):
        return False
    if a.box is not None and b.box is not None and _same_root(a.root, b.root):
        return not any(_progressions_disjoint(x, y) for x, y in zip(a.box, b.box))
    return True


def region_of(val: torch.Tensor, root_val: torch.Tensor) -> Region:
    """The region of ``root_val``'s storage that ``val`` (a view sharing it) covers."""
    return region_of_geometry(_geometry(val), _geometry(root_val), is_dense_root(root_val))


def region_of_geometry(geom: tuple, root: tuple, root_dense: bool = True) -> Region:
    """``region_of`` on (size, stride, offset) triples: the view ``geom`` of root ``root``."""
    size, stride, off = geom
    if any(_known(s == 0) for s in size):
        return Region(off, off)
    hi = off + span_extent(size, stride)
    if not root_dense:
        return Region(off, hi)
    chain = views.infer_view(*root, size, stride, off)
    if chain.uses_as_strided:
        return Region(off, hi)
    box = [(0, n, 1) for n in root[0]]
    dims = list(range(len(box)))  # current dim -> root dim
    for step in chain.steps:
        d = dims[step.dim]
        start, _, stp = box[d]
        if isinstance(step, views.Select):
            box[d] = (start + step.index * stp, start + step.index * stp + 1, 1)
            dims.pop(step.dim)
        else:
            box[d] = (start + step.start * stp, start + step.stop * stp, stp * step.step)
    return Region(off, hi, root=root, box=tuple(box))


def _geometry(val: torch.Tensor) -> tuple:
    return (tuple(val.shape), tuple(val.stride()), val.storage_offset())


def is_dense_root(val: torch.Tensor) -> bool:
    """Distinct indices of the root address distinct elements (no stride-0 / overlap)."""
    return all(_known(st != 0) or _known(s <= 1) for s, st in zip(val.shape, val.stride()))


def same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    return _same_root(
        (tuple(a.shape), tuple(a.stride()), a.storage_offset()),
        (tuple(b.shape), tuple(b.stride()), b.storage_offset()),
    )


def region_of_storage(val: torch.Tensor) -> Region:
    """The storage interval ``val`` spans (no per-dim box: its base is not known)."""
    size, stride, off = tuple(val.shape), tuple(val.stride()), val.storage_offset()
    if any(_known(s == 0) for s in size):
        return Region(off, off)
    return Region(off, off + span_extent(size, stride))


def tensors_may_overlap(a: torch.Tensor, b: torch.Tensor, root: torch.Tensor) -> bool:
    """Whether two views of ``root``'s storage may share an element."""
    return overlaps(region_of(a, root), region_of(b, root))

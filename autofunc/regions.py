"""Which elements of a storage a tensor covers, and whether two such regions may overlap.

Pure geometry on (size, stride, storage offset), ints or SymInts, decided only when statically
known (never installing guards); anything undecided counts as overlapping. Used by the HOPs (may
two mutable arguments alias?) and by the alias analysis of the re-inplace pass. Imports
``views`` and ``symbolic`` only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from . import views
from .symbolic import cached_when_static
from .symbolic import known as _known
from .symbolic import span_extent

__all__ = [
    "Region",
    "overlaps",
    "is_empty",
    "region_of",
    "region_of_geometry",
    "contains",
    "is_dense_root",
    "region_of_storage",
    "same_geometry",
    "span_holds",
    "tensors_may_overlap",
]


@dataclasses.dataclass(frozen=True)
class Region:
    """A part of a version's memory.

    ``lo``/``hi`` bound it in BYTES ([lo, hi)), so that views of one storage with different
    dtypes (``kv[l].view(torch.float8_e4m3fn)`` of a ``uint8`` cache) compare. ``box`` (when
    known) gives, per dim of the version's root geometry ``root`` (size, stride, offset, element
    size), the (start, stop, step) of the root indices it covers, which lets two interleaved
    views (``qkv.split`` halves, ``kv[l]`` vs ``kv[l+1]`` rows) be proven disjoint. A box is
    exact, never widened (``contains`` relies on it).
    """

    lo: Any
    hi: Any
    root: tuple | None = None
    box: tuple | None = None
    # (size, stride, offset, itemsize), all ints, when the region has at most _EXACT_ELEMENTS
    # elements: then its exact bytes can be listed (Note [Exact small regions]).
    elems: tuple | None = None
    # (size, stride, offset, itemsize) of the view it was computed from (ints or SymInts;
    # ``None`` for a region not made from one): what places it in the coordinates of another
    # version (Note [Written and read in two coordinates] in passes/alias.py). Not part of
    # its identity: two views of one extent are one region.
    geom: tuple | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def everything(cls) -> "Region":
        """Overlaps every region (used when coordinates cannot be related)."""
        return cls(-(2**62), 2**62)


def _all_known_eq(xs: tuple, ys: tuple) -> bool:
    return len(xs) == len(ys) and all(_known(x == y) for x, y in zip(xs, ys))


def _same_root(a: tuple, b: tuple) -> bool:
    return (
        _all_known_eq(a[0], b[0])
        and _all_known_eq(a[1], b[1])
        and _known(a[2] == b[2])
        and a[3:] == b[3:]  # element sizes (roots built by region_of_geometry carry one)
    )


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
    if a.elems is not None and b.elems is not None:
        return _elements_meet(a.elems, b.elems)
    return True


# Note [Exact small regions]
# A view that no select/slice chain of its root describes (``x.unfold(1, 2, 4)``, a transposed
# or diagonal view) is known only by the byte interval it spans, so any other view inside that
# interval counts as overlapping it: ``op(x.unfold(1, 2, 4), x[1, 2:4])`` cloned ``x`` for a
# read of columns the op never writes. When both views have static sizes and few elements,
# their exact bytes are listed and compared instead (sound: it is the definition of overlap).
_EXACT_ELEMENTS = 4096


def is_empty(r: Region) -> bool:
    """Whether ``r`` provably covers no element (a view with a size of 0)."""
    return _known(r.hi <= r.lo)


def _elements_meet(a: tuple, b: tuple) -> bool:
    """Whether two exact regions (``Region.elems``) share a byte."""
    if a[3] == b[3]:  # one element size: elements start on its multiples, so meet or miss whole
        return not _starts(*a[:3]).isdisjoint(_starts(*b[:3]))
    return not _bytes(a).isdisjoint(_bytes(b))


@functools.lru_cache(maxsize=64)  # at most 64 x 4096 offsets held
def _starts(size: tuple, stride: tuple, offset: int) -> frozenset:
    """The storage offsets, in elements, of a static view's elements."""
    starts = [offset]
    for n, st in zip(size, stride):
        starts = [x + i * st for x in starts for i in range(n)]
    return frozenset(starts)


def _bytes(elems: tuple) -> set:
    size, stride, offset, itemsize = elems
    return {x * itemsize + k for x in _starts(size, stride, offset) for k in range(itemsize)}


def _exact_elements(size: tuple, stride: tuple, off: Any, itemsize: int) -> tuple | None:
    if not all(isinstance(x, int) for x in (*size, *stride, off)):
        return None
    numel = 1
    for n in size:
        numel *= n
    return (tuple(size), tuple(stride), off, itemsize) if numel <= _EXACT_ELEMENTS else None


def region_of(val: torch.Tensor, root_val: torch.Tensor) -> Region:
    """The region of ``root_val``'s storage that ``val`` (a view sharing it) covers."""
    return region_of_geometry(
        _geometry(val),
        _geometry(root_val),
        is_dense_root(root_val),
        itemsize=val.element_size(),
        root_itemsize=root_val.element_size(),
    )


def region_of_geometry(
    geom: tuple,
    root: tuple,
    root_dense: bool = True,
    itemsize: int = 1,
    root_itemsize: int | None = None,
) -> Region:
    """``region_of`` on (size, stride, offset) triples: the view ``geom`` of root ``root``.

    ``geom`` is in elements of ``itemsize`` bytes, ``root`` in elements of ``root_itemsize``
    (default: ``itemsize``). A view of another element size gets a box only when its geometry,
    rescaled to the root's elements, is exactly a select/slice view of the root (Note [Dtype
    views] in views/steps.py); otherwise only its byte interval is known.
    """
    root_itemsize = itemsize if root_itemsize is None else root_itemsize
    return _region(geom, root, root_dense, itemsize, root_itemsize)


@cached_when_static(maxsize=4096)  # Note [Memoized geometry] in symbolic.py
def _region(
    geom: tuple, root: tuple, root_dense: bool, itemsize: int, root_itemsize: int
) -> Region:
    size, stride, off = geom
    lo = off * itemsize
    if any(_known(s == 0) for s in size):
        return Region(lo, lo)
    hi = lo + itemsize * span_extent(size, stride)
    elems = _exact_elements(size, stride, off, itemsize)
    view = (tuple(size), tuple(stride), off, itemsize)
    if not root_dense:
        return Region(lo, hi, elems=elems, geom=view)
    box = _box_of(root, _in_root_elements(size, stride, off, itemsize, root_itemsize))
    if box is None:
        return Region(lo, hi, elems=elems, geom=view)
    return Region(lo, hi, root=(*root[:3], root_itemsize), box=box, elems=elems, geom=view)


def _box_of(root: tuple, candidates: list[tuple]) -> tuple | None:
    """The box (``Region.box``) of the first candidate geometry that a chain of boxed steps
    makes from ``root``, or ``None``. A candidate is also tried coalesced and then split at the
    root's strides (the same elements, in dims cut where the root's are), so a split or merged
    slice (``qkv[:, :64].view(T, 4, 16)``) is the slice it covers. Each step gives its own box
    (``Step.box``): one without a box (``as_strided``, ``view``) leaves the region to its
    span."""
    geoms: list[views.Geom] = []
    for in_root in candidates:
        geom = views.Geom(*in_root)
        for g in (geom, views.split_at(views.coalesced(geom), root[1])):
            if not any(_same_root(g, h) for h in geoms):  # (no hash: a SymInt has none)
                geoms.append(g)
    for geom in geoms:
        chain = views.infer_view(*root, *geom)
        box: tuple | None = tuple((0, n, 1) for n in root[0])
        dims = tuple(range(len(box)))  # current dim -> root dim
        for step in chain.steps:
            moved = step.box(box, dims)
            if moved is None:
                box = None
                break
            box, dims = moved
        if box is not None:
            return box
    return None


def _in_root_elements(size, stride, off, itemsize: int, root_itemsize: int) -> list[tuple]:
    """Exact geometries, in the root's elements, of the bytes a view covers (Note [Dtype views]).

    The dtype view's own rescaling first; for a wider element, also each element as a trailing
    dim of ``itemsize // root_itemsize`` root elements (a strided column of ``int32`` over a
    ``uint8`` root). Empty when the view's elements are not whole root elements.
    """
    out = []
    rescaled = views.dtype_view_geometry(size, stride, off, itemsize, root_itemsize)
    if rescaled is not None:
        out.append(rescaled)
    if itemsize > root_itemsize and itemsize % root_itemsize == 0:
        r = itemsize // root_itemsize
        out.append(((*size, r), (*(st * r for st in stride), 1), off * r))
    return out


def contains(a: Region, b: Region) -> bool:
    """Whether every element of ``b`` is provably in ``a``: exact boxes of one root, a gapless
    ``a`` whose bytes hold ``b``'s interval, or both regions' exact elements.

    Note [Containment without a box]
    A view no select/slice chain describes (an ``unfold``, a transposed slice) has no box, so
    only the boxes could not place it inside anything: a read of ``x.unfold(1, 2, 2)[..., 2:,
    :]`` after a first call wrote ``x`` in place at another storage offset could not be placed
    in ``x``'s coordinates (Note [Written and read in two coordinates]), overlapped the same
    call's write of ``[..., :2, :]`` and cloned ``x`` (fuzz seed 20261906 #36, 192 B over
    PyTorch's built-in). Two facts need no box: a region whose elements fill their byte
    interval (sizes and strides of a permuted contiguous tensor) holds every byte inside that
    interval, and two small static regions (``Region.elems``) are compared element by
    element."""
    if a.box is not None and b.box is not None and _same_root(a.root, b.root):
        if _box_contains(a.box, b.box):
            return True
    if _gapless(a) and _known(a.lo <= b.lo) and _known(b.hi <= a.hi):
        return True
    if a.elems is not None and b.elems is not None:
        if a.elems[3] == b.elems[3]:
            return _starts(*b.elems[:3]) <= _starts(*a.elems[:3])
        return _bytes(b.elems) <= _bytes(a.elems)
    return False


def _box_contains(a: tuple, b: tuple) -> bool:
    for (a0, a1, sa), (b0, b1, sb) in zip(a, b):
        if _known(b1 <= b0):
            return True  # b is empty
        if not (_known(a0 <= b0) and _known(b1 <= a1)):
            return False
        if not (isinstance(sa, int) and sa == 1):
            ints = all(isinstance(x, int) for x in (a0, b0, sa, sb))
            if not (ints and sb % sa == 0 and (b0 - a0) % sa == 0):
                return False
    return True


def _gapless(r: Region) -> bool:
    """Whether ``r``'s view (static sizes and strides) covers every byte of ``[lo, hi)``: its
    dims of more than one element, ordered by stride, are those of a contiguous tensor."""
    if r.geom is None:
        return False
    size, stride, _, _ = r.geom
    if not all(isinstance(x, int) for x in (*size, *stride)):
        return False
    expected = 1
    for n, st in sorted(((n, st) for n, st in zip(size, stride) if n > 1), key=lambda d: d[1]):
        if st != expected:
            return False
        expected *= n
    return True


def _geometry(val: torch.Tensor) -> tuple:
    return (tuple(val.shape), tuple(val.stride()), val.storage_offset())


def is_dense_root(val: torch.Tensor) -> bool:
    """Distinct indices of the root address distinct elements (no stride-0 / overlap)."""
    return all(_known(st != 0) or _known(s <= 1) for s, st in zip(val.shape, val.stride()))


def same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same size, stride, offset and element size (hence the same bytes)."""
    if a.element_size() != b.element_size():
        return False
    if not (a._has_symbolic_sizes_strides or b._has_symbolic_sizes_strides):  # all ints
        return (
            a.shape == b.shape
            and a.stride() == b.stride()
            and _known(a.storage_offset() == b.storage_offset())
        )
    return _same_root(
        (tuple(a.shape), tuple(a.stride()), a.storage_offset()),
        (tuple(b.shape), tuple(b.stride()), b.storage_offset()),
    )


def region_of_storage(val: torch.Tensor) -> Region:
    """The storage interval ``val`` spans, in bytes (no per-dim box: its base is not known)."""
    return region_of_geometry(_geometry(val), (), False, itemsize=val.element_size())


def span_holds(outer: torch.Tensor, inner: torch.Tensor) -> bool:
    """Whether ``inner``'s storage span provably lies inside ``outer``'s (one storage; bytes,
    so dtypes may differ)."""
    a, b = region_of_storage(outer), region_of_storage(inner)
    return _known(a.lo <= b.lo) and _known(b.hi <= a.hi)


def tensors_may_overlap(a: torch.Tensor, b: torch.Tensor, root: torch.Tensor) -> bool:
    """Whether two views of ``root``'s storage may share an element."""
    return overlaps(region_of(a, root), region_of(b, root))

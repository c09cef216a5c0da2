"""The view steps a ``ViewChain`` is made of: one ATen view op each, carrying its behaviour.

A step is a frozen dataclass of ints, ``torch.SymInt`` s and dtypes. Each kind provides, so that
no caller asks which kind it holds:

- ``apply(t)``: the ATen view op on a tensor (real, fake or proxy-traced);
- ``geometry(geom, itemsize)``: the same on a geometry, pure arithmetic, with the element size
  the result is measured in (only ``DtypeView`` changes it);
- ``emit(x, graph)``: the same as nodes of a graph under construction (``Graph``, which
  ``passes.emit`` implements on an FX graph), where a chain is relative to its base (Note
  [Relative chains] in hops/adapter.py);
- ``box(box, dims)``: the root indices the result covers, given those its input covers (for
  ``regions``), or ``None`` where that is no box;
- ``encode()`` / ``decode(wire, pos)``: its fields on the wire (Note [A flat wire format]);
- ``str(step)``: the op as text; ``subscript()``: the step as one ``[...]`` entry, if it is one.

``STEPS`` (at the end) is the one tag -> class table, and a ``ViewChain`` holds only steps of
its kinds (an unknown step raises ``TypeError`` when the chain is made). To add a step: a
dataclass here with those methods, a new tag in ``STEPS`` (never reuse one), and an example in
tests/test_views.py (``STEP_EXAMPLES``); inference (views/inference.py) decides when to use it.
Imports only ``autofunc.errors``, ``autofunc.symbolic`` and ``views.geometry``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from ..errors import MalformedViewsError
from ..symbolic import Arith, copy_extent
from .geometry import Geom, IntLike, as_int, rescale, view_strides

__all__ = [
    "STEPS",
    "AsStrided",
    "Box",
    "DtypeView",
    "Graph",
    "Select",
    "Slice",
    "Step",
    "Subscript",
    "View",
]

_aten = torch.ops.aten


class Subscript(NamedTuple):
    """A step written as one entry of a ``[...]`` subscript (``x[1, :, 2:5]``)."""

    dim: int  # the dim the entry is for, as the step names it (a negative one: no subscript)
    entry: str  # ``3`` or ``2:5``
    drops_dim: bool  # whether later dims shift down (a select)


class Graph(Protocol):
    """Where ``emit`` puts a step's ATen calls (``passes.emit`` implements it on an FX graph)."""

    arith: Arith  # arithmetic on the ints and nodes the emitted code computes with

    def call(self, target: Any, args: tuple) -> Any:
        """Insert ``target(*args)`` and return what stands for its result."""


# Per dim of a root: (start, stop, step) of the root indices covered; with it, for each dim of
# the current tensor, the root dim it walks (``regions.Region.box``).
Box = tuple[tuple[Any, Any, Any], ...]


def _dim(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


def _wrap_index(index: IntLike, n: IntLike) -> IntLike:
    if isinstance(index, int) and isinstance(n, int) and index < 0:
        return index + n
    return index


@dataclass(frozen=True)
class Select:
    """``aten.select.int(t, dim, index)``: drops ``dim``."""

    dim: int
    index: IntLike

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.select.int(t, self.dim, self.index)

    def geometry(self, geom: Geom, itemsize: int | None) -> tuple[Geom, int | None]:
        size, stride = list(geom.size), list(geom.stride)
        dim = _dim(self.dim, len(size))
        offset = geom.offset + _wrap_index(self.index, size[dim]) * stride[dim]
        del size[dim], stride[dim]
        return Geom(tuple(size), tuple(stride), offset), itemsize

    def emit(self, x: Any, graph: Graph) -> Any:
        return graph.call(_aten.select.int, (x, self.dim, self.index))

    def box(self, box: Box, dims: tuple[int, ...]) -> tuple[Box, tuple[int, ...]]:
        d = dims[self.dim]
        start, _, step = box[d]
        first = start + self.index * step
        return _put(box, d, (first, first + 1, 1)), dims[: self.dim] + dims[self.dim + 1 :]

    def encode(self) -> tuple:
        return (self.dim, self.index)

    @classmethod
    def decode(cls, wire: Sequence, pos: int) -> tuple[Select, int]:
        return cls(*wire[pos : pos + 2]), pos + 2

    def __str__(self) -> str:
        return f"select({self.dim}, {self.index})"

    def subscript(self) -> Subscript:
        return Subscript(self.dim, str(self.index), drops_dim=True)


@dataclass(frozen=True)
class Slice:
    """``aten.slice.Tensor(t, dim, start, stop, step)``."""

    dim: int
    start: IntLike
    stop: IntLike
    step: int = 1

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.slice.Tensor(t, self.dim, self.start, self.stop, self.step)

    def geometry(self, geom: Geom, itemsize: int | None) -> tuple[Geom, int | None]:
        size, stride = list(geom.size), list(geom.stride)
        dim = _dim(self.dim, len(size))
        start, length = self._start_len(size[dim])
        offset = geom.offset + start * stride[dim]
        size[dim], stride[dim] = length, stride[dim] * self.step
        return Geom(tuple(size), tuple(stride), offset), itemsize

    def _start_len(self, n: IntLike) -> tuple[IntLike, IntLike]:
        """(start, length) on a dim of size ``n`` (clamped like ATen for ints)."""
        start, stop, k = self.start, self.stop, self.step
        if all(isinstance(v, int) for v in (start, stop, n)):
            start = min(max(start + n if start < 0 else start, 0), n)
            stop = min(max(stop + n if stop < 0 else stop, start), n)
        return start, (stop - start + k - 1) // k

    def emit(self, x: Any, graph: Graph) -> Any:
        return graph.call(_aten.slice.Tensor, (x, self.dim, self.start, self.stop, self.step))

    def box(self, box: Box, dims: tuple[int, ...]) -> tuple[Box, tuple[int, ...]]:
        """Exact for the bounds inference writes (in range: ``infer_view`` verifies them)."""
        d = dims[self.dim]
        start, _, step = box[d]
        entry = (start + self.start * step, start + self.stop * step, step * self.step)
        return _put(box, d, entry), dims

    def encode(self) -> tuple:
        return (self.dim, self.start, self.stop, self.step)

    @classmethod
    def decode(cls, wire: Sequence, pos: int) -> tuple[Slice, int]:
        return cls(*wire[pos : pos + 4]), pos + 4

    def __str__(self) -> str:
        return f"slice({self.dim}, {self.start}, {self.stop}, {self.step})"

    def subscript(self) -> Subscript:
        start = "" if as_int(self.start) == 0 else str(self.start)
        entry = f"{start}:{self.stop}" + ("" if self.step == 1 else f":{self.step}")
        return Subscript(self.dim, entry, drops_dim=False)


@dataclass(frozen=True)
class AsStrided:
    """``aten.as_strided.default(t, size, stride, storage_offset)``: the last resort.

    The offset is absolute (counted from the start of the storage, like
    ``Tensor.storage_offset()``) in a chain applied to the tensor it was inferred from. The
    chains a HOP carries (``hops.v2.ArgView``, ``hops.adapter.Slot``) count it from their base's
    own offset instead (Note [Relative chains] in hops/adapter.py); ``ViewChain.shifted``
    converts one into the other.
    """

    size: tuple[IntLike, ...]
    stride: tuple[IntLike, ...]
    storage_offset: IntLike

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", tuple(self.size))
        object.__setattr__(self, "stride", tuple(self.stride))

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        size, stride = list(self.size), list(self.stride)
        return torch.ops.aten.as_strided.default(t, size, stride, self.storage_offset)

    def geometry(self, geom: Geom, itemsize: int | None) -> tuple[Geom, int | None]:
        return Geom(tuple(self.size), tuple(self.stride), self.storage_offset), itemsize

    def emit(self, x: Any, graph: Graph) -> Any:
        """``x`` with this size and stride at ``storage_offset`` elements past ``x``'s own
        offset (a relative chain's), which is all ``as_strided`` may be given (Note [Storage
        offsets] in passes/emit.py): without an offset it keeps its input's, and a nonzero one
        is a ``slice`` of a flat view of ``x``."""
        size, stride, rel = list(self.size), list(self.stride), self.storage_offset
        if isinstance(rel, int) and rel == 0:
            return graph.call(_aten.as_strided.default, (x, size, stride))
        end = copy_extent(size, stride, graph.arith, start=rel)
        flat = graph.call(_aten.as_strided.default, (x, [end], [1]))
        shifted = graph.call(_aten.slice.Tensor, (flat, 0, rel, end))
        return graph.call(_aten.as_strided.default, (shifted, size, stride))

    def box(self, box: Box, dims: tuple[int, ...]) -> None:
        return None  # any geometry: regions know it by its span (and its elements if few)

    def encode(self) -> tuple:
        return (len(self.size), *self.size, *self.stride, self.storage_offset)

    @classmethod
    def decode(cls, wire: Sequence, pos: int) -> tuple[AsStrided, int]:
        ndim, pos = wire[pos], pos + 1
        size, stride = wire[pos : pos + ndim], wire[pos + ndim : pos + 2 * ndim]
        return cls(tuple(size), tuple(stride), wire[pos + 2 * ndim]), pos + 2 * ndim + 1

    def __str__(self) -> str:
        return f"as_strided({tuple(self.size)}, {tuple(self.stride)}, {self.storage_offset})"

    def subscript(self) -> None:
        return None


@dataclass(frozen=True)
class DtypeView:
    """``aten.view.dtype(t, dtype)``: the same bytes read as ``dtype``.

    Note [Dtype views]
    With the same element size the geometry is unchanged. Otherwise (ATen's rule) the last dim
    must have stride 1 and is rescaled by the ratio of element sizes, as are the other strides
    and the storage offset (a narrower dtype multiplies them, a wider one divides them, which must
    be exact). Geometry is therefore measured in elements of the *current* dtype: a chain's
    ``geometry`` needs the base's element size once a step changes it.
    """

    dtype: torch.dtype

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.view.dtype(t, self.dtype)

    def geometry(self, geom: Geom, itemsize: int | None) -> tuple[Geom, int | None]:
        """Raises ``ValueError`` without ``itemsize`` or where ATen refuses the dtype view."""
        if itemsize is None:
            raise ValueError("the base's element size is needed")
        out = rescale(geom, itemsize, self.dtype.itemsize)
        if out is None:
            raise ValueError(f"{self} is not valid here")
        return out, self.dtype.itemsize

    def emit(self, x: Any, graph: Graph) -> Any:
        return graph.call(_aten.view.dtype, (x, self.dtype))

    def box(self, box: Box, dims: tuple[int, ...]) -> None:
        return None  # another element size: regions rescale the geometry instead

    def encode(self) -> tuple:
        return (_dtype_code(self.dtype),)

    @classmethod
    def decode(cls, wire: Sequence, pos: int) -> tuple[DtypeView, int]:
        return cls(_dtype_of_code(wire[pos])), pos + 1

    def __str__(self) -> str:
        return f"view({self.dtype})"

    def subscript(self) -> None:
        return None


@dataclass(frozen=True)
class View:
    """``aten.view.default(t, shape)``: the same elements, their dims split or merged (Note
    [View steps] in views/geometry.py): ``qkv.split(...)[0].view(-1, H, D)`` is
    ``[:, :H*D] -> view(T, H, D)``.

    ``shape`` holds no ``-1``. Valid only where ATen allows the view (``geometry`` raises
    ``ValueError`` otherwise); inference uses it only after checking that.
    """

    shape: tuple[IntLike, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return _aten.view.default(t, list(self.shape))

    def geometry(self, geom: Geom, itemsize: int | None) -> tuple[Geom, int | None]:
        stride = view_strides(geom.size, geom.stride, self.shape)
        if stride is None:
            raise ValueError(f"{self} is not valid on sizes {geom.size}, strides {geom.stride}")
        return Geom(self.shape, stride, geom.offset), itemsize

    def emit(self, x: Any, graph: Graph) -> Any:
        return graph.call(_aten.view.default, (x, list(self.shape)))

    def box(self, box: Box, dims: tuple[int, ...]) -> None:
        # Conservative: regions coalesce a geometry first (views.geometry.coalesced), so a
        # split slice is a box of its root without this step; what is left is known by its span.
        return None

    def encode(self) -> tuple:
        return (len(self.shape), *self.shape)

    @classmethod
    def decode(cls, wire: Sequence, pos: int) -> tuple[View, int]:
        ndim = wire[pos]
        if not isinstance(ndim, int) or ndim < 0:
            raise MalformedViewsError(f"a view step of {ndim!r} dims")
        return cls(tuple(wire[pos + 1 : pos + 1 + ndim])), pos + 1 + ndim

    def __str__(self) -> str:
        return f"view({', '.join(map(str, self.shape))})"

    def subscript(self) -> None:
        return None


def _put(box: Box, d: int, entry: tuple) -> Box:
    return box[:d] + (entry,) + box[d + 1 :]


# The dtypes a ``DtypeView`` can name on the wire, by index. Append only: an index, once given,
# names its dtype in every saved program.
_WIRE_DTYPES: tuple[str, ...] = (
    "float32", "float64", "float16", "bfloat16", "complex64", "complex128",
    "uint8", "int8", "int16", "int32", "int64", "bool",
    "uint16", "uint32", "uint64", "complex32",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2", "bits8", "bits16",
)  # fmt: skip


def _dtype_code(dtype: torch.dtype) -> int:
    """``torch.float8_e4m3fn`` -> its index in ``_WIRE_DTYPES``."""
    name = str(dtype).removeprefix("torch.")
    if name not in _WIRE_DTYPES:
        raise ValueError(f"view(dtype) to {dtype} has no wire code")
    return _WIRE_DTYPES.index(name)


def _dtype_of_code(code: Any) -> torch.dtype:
    """Inverse of ``_dtype_code``; ``ValueError`` when the code names no dtype of this torch."""
    name = _WIRE_DTYPES[code] if isinstance(code, int) and 0 <= code < len(_WIRE_DTYPES) else None
    dtype = getattr(torch, name, None) if name else None
    if not isinstance(dtype, torch.dtype):
        raise MalformedViewsError(f"unknown dtype code {code!r} in a view chain")
    return dtype


Step = Select | Slice | AsStrided | DtypeView | View

# Wire tag -> step kind, the one table of step kinds (Note [A flat wire format] in wire.py): a
# step is written as its tag, then its ``encode()``. Append only, like ``_WIRE_DTYPES``.
STEPS: dict[int, type[Step]] = {
    0: Select,  # (0, dim, index)
    1: Slice,  # (1, dim, start, stop, step)
    2: AsStrided,  # (2, ndim, *size, *stride, storage_offset)
    3: DtypeView,  # (3, dtype code): see _WIRE_DTYPES
    4: View,  # (4, ndim, *shape)
}

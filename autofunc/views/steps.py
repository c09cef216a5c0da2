"""The view steps a ``ViewChain`` is made of: one ATen view op each.

``Select`` / ``Slice`` / ``AsStrided`` / ``DtypeView`` are frozen dataclasses of ints,
``torch.SymInt`` s and dtypes (values, hashable where their fields are). Imports only
``views.geometry``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .geometry import IntLike

__all__ = ["AsStrided", "DtypeView", "Select", "Slice", "Step"]


@dataclass(frozen=True)
class Select:
    """``aten.select.int(t, dim, index)``: drops ``dim``."""

    dim: int
    index: IntLike


@dataclass(frozen=True)
class Slice:
    """``aten.slice.Tensor(t, dim, start, stop, step)``."""

    dim: int
    start: IntLike
    stop: IntLike
    step: int = 1


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


Step = Select | Slice | AsStrided | DtypeView

"""``ViewChain``: the steps that regenerate a view from its base, and their rendering.

A chain is applied to a tensor (``apply``), to a geometry (``geometry``, pure arithmetic) and
rendered as text (``str``: ``[3, 2:5] -> view(torch.float8_e4m3fn)``; graph snapshots pin it).
Imports only ``views.geometry`` and ``views.steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .geometry import Geom, IntLike, as_int, rescale
from .steps import AsStrided, DtypeView, Select, Slice, Step

__all__ = ["ViewChain"]


def _wrap_index(index: IntLike, n: IntLike) -> IntLike:
    if isinstance(index, int) and isinstance(n, int) and index < 0:
        return index + n
    return index


def _slice_start_len(step: Slice, n: IntLike) -> tuple[IntLike, IntLike]:
    """(start, length) of ``aten.slice`` on a dim of size ``n`` (clamped like ATen for ints)."""
    start, stop, k = step.start, step.stop, step.step
    if all(isinstance(v, int) for v in (start, stop, n)):
        start = min(max(start + n if start < 0 else start, 0), n)
        stop = min(max(stop + n if stop < 0 else stop, start), n)
    return start, (stop - start + k - 1) // k


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _fmt_call(step: Step) -> str:
    if isinstance(step, DtypeView):
        return f"view({step.dtype})"
    if isinstance(step, Select):
        return f"select({step.dim}, {step.index})"
    if isinstance(step, Slice):
        return f"slice({step.dim}, {step.start}, {step.stop}, {step.step})"
    return f"as_strided({tuple(step.size)}, {tuple(step.stride)}, {step.storage_offset})"


def _fmt_index(step: Select | Slice) -> str:
    if isinstance(step, Select):
        return str(step.index)
    start = "" if as_int(step.start) == 0 else str(step.start)
    text = f"{start}:{step.stop}"
    return text if step.step == 1 else f"{text}:{step.step}"


def _render(steps: Sequence[Step]) -> str:
    """Merge runs of select/slice on distinct dims into one subscript; join runs with ' -> '."""
    dims = (s.dim for s in steps if isinstance(s, (Select, Slice)))
    width = len(steps) + 1 + max(dims, default=0)
    parts: list[str] = []
    entries: dict[int, str] = {}  # original dim (at the run's input) -> subscript entry
    alive: list[int] = list(range(width))  # current dim -> original dim

    def flush() -> None:
        if entries:
            items = (entries.get(d, ":") for d in range(max(entries) + 1))
            parts.append("[" + ", ".join(items) + "]")
        entries.clear()
        alive[:] = range(width)

    for step in steps:
        if isinstance(step, (AsStrided, DtypeView)) or step.dim < 0:
            flush()
            parts.append(_fmt_call(step))
            continue
        if alive[step.dim] in entries:
            flush()
        entries[alive[step.dim]] = _fmt_index(step)
        if isinstance(step, Select):
            del alive[step.dim]
    flush()
    return " -> ".join(parts)


# --------------------------------------------------------------------------------------------
# ViewChain
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewChain:
    """Steps that regenerate a view from its base, applied in order; ``()`` is the base itself."""

    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def is_alias(self) -> bool:
        """Whether the view is the base itself (no step)."""
        return not self.steps

    @property
    def uses_as_strided(self) -> bool:
        """Whether any step is an ``as_strided`` (the last-resort fallback)."""
        return any(isinstance(step, AsStrided) for step in self.steps)

    def shifted(self, delta: IntLike) -> ViewChain:
        """The chain with every ``AsStrided`` offset moved by ``delta`` elements: a chain
        relative to a base's own offset, shifted by that offset, is absolute (and back with
        ``-offset``). Other steps do not depend on the offset."""
        if not self.uses_as_strided:
            return self
        steps = tuple(
            AsStrided(s.size, s.stride, s.storage_offset + delta) if isinstance(s, AsStrided) else s
            for s in self.steps
        )
        return ViewChain(steps)

    def apply(self, base: torch.Tensor) -> torch.Tensor:
        """Applies the steps to ``base`` with ATen view ops.

        Args:
            base: The tensor (real, fake or proxy-traced) the chain was inferred against.

        Returns:
            ``base`` itself for an alias chain, else a view sharing ``base``'s storage.
        """
        out = base
        for step in self.steps:
            if isinstance(step, Select):
                out = torch.ops.aten.select.int(out, step.dim, step.index)
            elif isinstance(step, Slice):
                out = torch.ops.aten.slice.Tensor(out, step.dim, step.start, step.stop, step.step)
            elif isinstance(step, DtypeView):
                out = torch.ops.aten.view.dtype(out, step.dtype)
            else:
                size, stride = list(step.size), list(step.stride)
                out = torch.ops.aten.as_strided.default(out, size, stride, step.storage_offset)
        return out

    def geometry(
        self,
        size: Sequence[IntLike],
        stride: Sequence[IntLike],
        storage_offset: IntLike,
        itemsize: int | None = None,
    ) -> tuple[tuple[IntLike, ...], tuple[IntLike, ...], IntLike]:
        """Pure arithmetic: the geometry obtained by applying the chain to a base geometry.

        Int start/stop/index values are normalized and clamped like ATen does; symbolic ones
        are assumed in range (as ``infer_view`` guarantees).

        Args:
            size: Base sizes.
            stride: Base strides (elements).
            storage_offset: Base storage offset (elements).
            itemsize: The base's element size in bytes; needed when the chain has a
                ``DtypeView`` step (Note [Dtype views]).

        Returns:
            ``(size, stride, storage_offset)`` of the resulting view, in elements of
            ``self.dtype(base dtype)``.

        Raises:
            ValueError: If the chain has a ``DtypeView`` and ``itemsize`` is not given, or the
                geometry does not allow that dtype view.
        """
        sizes, strides, offset = list(size), list(stride), storage_offset
        for step in self.steps:
            if isinstance(step, DtypeView):
                if itemsize is None:
                    raise ValueError(f"{self}: the base's element size is needed")
                geom = rescale(
                    Geom(tuple(sizes), tuple(strides), offset), itemsize, step.dtype.itemsize
                )
                if geom is None:
                    raise ValueError(f"{self}: view({step.dtype}) is not valid here")
                sizes, strides, offset = list(geom.size), list(geom.stride), geom.offset
                itemsize = step.dtype.itemsize
                continue
            if isinstance(step, AsStrided):
                sizes, strides = list(step.size), list(step.stride)
                offset = step.storage_offset
                continue
            dim = step.dim + len(sizes) if step.dim < 0 else step.dim
            if isinstance(step, Select):
                offset = offset + _wrap_index(step.index, sizes[dim]) * strides[dim]
                del sizes[dim], strides[dim]
            else:
                start, length = _slice_start_len(step, sizes[dim])
                offset = offset + start * strides[dim]
                sizes[dim], strides[dim] = length, strides[dim] * step.step
        return tuple(sizes), tuple(strides), offset

    def dtype(self, base_dtype: torch.dtype) -> torch.dtype:
        """The dtype of the view the chain makes from a base of ``base_dtype``."""
        return next((s.dtype for s in reversed(self.steps) if isinstance(s, DtypeView)), base_dtype)

    def __str__(self) -> str:
        return "alias" if not self.steps else _render(self.steps)

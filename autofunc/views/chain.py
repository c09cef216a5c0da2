"""``ViewChain``: the steps that regenerate a view from its base, and their rendering.

A chain is applied to a tensor (``apply``), to a geometry (``geometry``, pure arithmetic) and
rendered as text (``str``: ``[3, 2:5] -> view(torch.float8_e4m3fn)``; graph snapshots pin it).
Imports only ``views.geometry`` and ``views.steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .geometry import Geom, IntLike
from .steps import STEPS, AsStrided, DtypeView, Step

__all__ = ["ViewChain"]



# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _render(steps: Sequence[Step]) -> str:
    """Merge runs of select/slice on distinct dims into one subscript; join runs with ' -> '."""
    subs = [step.subscript() for step in steps]
    width = len(steps) + 1 + max((sub.dim for sub in subs if sub is not None), default=0)
    parts: list[str] = []
    entries: dict[int, str] = {}  # original dim (at the run's input) -> subscript entry
    alive: list[int] = list(range(width))  # current dim -> original dim

    def flush() -> None:
        if entries:
            items = (entries.get(d, ":") for d in range(max(entries) + 1))
            parts.append("[" + ", ".join(items) + "]")
        entries.clear()
        alive[:] = range(width)

    for step, sub in zip(steps, subs):
        if sub is None or sub.dim < 0:
            flush()
            parts.append(str(step))
            continue
        if alive[sub.dim] in entries:
            flush()
        entries[alive[sub.dim]] = sub.entry
        if sub.drops_dim:
            del alive[sub.dim]
    flush()
    return " -> ".join(parts)


# --------------------------------------------------------------------------------------------
# ViewChain
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewChain:
    """Steps that regenerate a view from its base, applied in order; ``()`` is the base itself.

    Raises ``TypeError`` when made with anything but steps of ``steps.STEPS``: whatever reads a
    chain (emission, regions) asks each step for its own behaviour and never guesses one.
    """

    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        for step in steps:
            if type(step) not in STEPS.values():  # read now: the one table
                raise TypeError(f"unknown view step {step!r}: not a kind of views.steps.STEPS")
        object.__setattr__(self, "steps", steps)

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
            out = step.apply(out)
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
        geom = Geom(tuple(size), tuple(stride), storage_offset)
        for step in self.steps:
            try:
                geom, itemsize = step.geometry(geom, itemsize)
            except ValueError as e:  # a DtypeView's: name the chain too
                raise ValueError(f"{self}: {e}") from None
        return geom.size, geom.stride, geom.offset

    def dtype(self, base_dtype: torch.dtype) -> torch.dtype:
        """The dtype of the view the chain makes from a base of ``base_dtype``."""
        return next((s.dtype for s in reversed(self.steps) if isinstance(s, DtypeView)), base_dtype)

    def __str__(self) -> str:
        # rendered once per chain: chains decoded from a plain wire are shared by every call
        # with that wire (``hops.v2.decode_views``), and each is rendered for every report
        text = self.__dict__.get("_text")
        if text is None:
            text = "alias" if not self.steps else _render(self.steps)
            object.__setattr__(self, "_text", text)
        return text

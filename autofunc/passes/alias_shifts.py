"""Reads and writes of a call's value merged into a base at another storage offset, placed in
the base's coordinates (Notes [A call's value read where it was written], [Written and read in
two coordinates], [Shifts with symbolic sizes]): :class:`ShiftedVersions`, a part of
``AliasAnalysis`` (alias.py), and the guard-free arithmetic it rests on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx as fx

from ..regions import Region, contains, is_dense_root, region_of_geometry
from ..symbolic import known
from ..views.geometry import as_int
from .alias_reads import Read
from .memory_ops import SHIFTABLE_VIEWS

__all__ = ["Shift", "ShiftedVersions", "relative_to", "static_shift"]

# Note [A base merged into a view of its root]
# A region is a set of bytes of its version's storage (``Region.lo``/``hi``: the storage offset
# times the element size; ``elems`` and a ``box`` the same bytes, finer). When a call's value
# ``new`` is written into ``base`` in place, element ``i`` of ``new``'s root lies at
# ``offset * itemsize + sum(i[d] * stride[d]) * itemsize`` of its storage, and element ``i`` of
# ``base`` at the same expression of ``base``'s own geometry in ``base``'s storage. Where the
# two geometries are equal (sizes, strides, storage offset, element size), every region of
# ``new``'s version names the bytes of ``base``'s storage it names in its own: the versions
# merge exactly, whatever ``base``'s root is. A box is compared only with a box of the same
# root geometry (``regions._same_root``), which names the same bytes in either version. Before,
# ``base`` had to be its root's geometry too, so a v2 base that is a reshape of its root made
# the merged version coarse: ``v0 = a.view(9); v1, v2 = v0.split([8, 1]); op(v1); op2(v1, v2)``
# copied ``v1``'s memory for the second call, its read of ``v2`` counted as overlapping its
# write of ``v1`` (fuzz seed 20261802 #77: 136 B over PyTorch's built-in). Any other geometry
# keeps the merged version coarse, placed by a shift where one is known (below).


@dataclasses.dataclass(frozen=True, slots=True)
class Shift:
    """Where a version merged into a base at another storage offset lies in the base's version
    (Note [A call's value read where it was written])."""

    base: Any  # the base's version, whose coordinates these are (while it is not coarse)
    ends: tuple  # the version's root and the base node: where a read's chain of views starts
    delta: Any  # the base's storage offset minus the version root's, in elements
    whole: Region  # the version root's own region (a read outside it is not placed)
    root: tuple  # the base's version root: (size, stride, offset)
    dense: bool  # is_dense_root of that root
    itemsize: int  # element size of the root, the base and the version


def relative_to(node: fx.Node, ends: tuple) -> bool:
    """Whether ``node`` is one of ``ends`` or a chain of views with relative offsets
    (``SHIFTABLE_VIEWS``) of one: its storage offset moves with theirs."""
    while node not in ends:
        if node.op != "call_function" or node.target not in SHIFTABLE_VIEWS or not node.args:
            return False
        node = node.args[0]
    return True


def static_shift(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """``b``'s storage offset minus ``a``'s, when that is a constant and the two have provably
    the same sizes, strides and element size (each element of ``a`` then has its counterpart
    in ``b`` that constant many elements further on); else ``None``.

    Note [Shifts with symbolic sizes]
    Under dynamic shapes the value of a call written into a view (vLLM's rotary query and
    key, ``getitem(split_with_sizes(qkv, [128, 64, 64], -1), i)`` of a ``qkv: f32[s72, 256]``)
    and that view have symbolic sizes such as ``(s72, 64)``, and strides and offsets that are
    ints or SymInts. Note [A call's value read where it was written] needs only three facts:
    (1) per dimension, ``a.size(d) == b.size(d)`` and ``a.stride(d) == b.stride(d)``;
    (2) ``delta = b.storage_offset() - a.storage_offset()`` is one int; (3) equal element
    sizes. Each is decided without a guard: (1) by ``known`` (``statically_known_true``: true
    only when the shape environment proves it from what every run of this graph already
    satisfies, the guards and runtime asserts installed before the pass, the axioms of its
    symbols; never ``bool()`` of a SymBool, which would guard), (2) by ``as_int`` (an int, or a
    SymInt whose expression is a constant: ``maybe_as_int``), (3) on ints. Anything undecided
    returns ``None``: the version stays coarse, its reads overlap everything, as before.

    Given (1)-(3), for every value the symbols take at run time, element ``i`` of ``a`` lies at
    ``a.storage_offset() + sum(i[d] * stride[d])`` and element ``i`` of ``b`` at that plus
    ``delta``, with the same ``stride`` expressions: a constant shift, whatever the sizes
    (vacuous when a size is 0: there is no element to place). A view of ``a`` taken by
    relative view ops has, at run time, the sizes, strides and offset its fake value records
    (the same ops on the same symbols), so it is placed in ``b``'s storage at that offset plus
    ``delta``. The pass adds no fact of its own about the symbols: the placed region is
    compared by ``regions.overlaps``/``contains``, whose answers are again decided by
    ``known`` only: exact for boxes of one root (select/slice chains), "may overlap" / "not
    contained" for everything they cannot decide. For the rotary that is exact whatever the
    token count: the shifted query ``qkv[:, 0:128]`` and the key ``qkv[:, 128:192]`` have the
    boxes ``((0, s72, 1), (0, 128, 1))`` and ``((0, s72, 1), (128, 192, 1))`` of the root
    ``(s72, 256)``, strides ``(256, 1)``: the same in the symbolic row dimension, disjoint
    in the static column one (``known(128 <= 128)``), and the root maps distinct indices to
    distinct elements, ``(r, c) -> 256 r + c`` with ``0 <= c < 256``, because its row stride
    (256) is static and at least the span of its column dimension (256 elements): so the two
    views share no element for any ``s72``, 0 included. Likewise ``slice_scatter(qkv, x, 1,
    128, 192)`` replaces exactly the key's box in every row (``contains``: equal bounds in
    every dimension). A symbolic ``delta`` is not placed (it would need a symbolic box origin;
    no case seen needs it).
    """
    if a.element_size() != b.element_size() or a.dim() != b.dim():
        return None
    pairs = [*zip(a.shape, b.shape), *zip(a.stride(), b.stride())]
    if not all(known(x == y) for x, y in pairs):
        return None
    return as_int(b.storage_offset() - a.storage_offset())


class ShiftedVersions:
    """The part of ``AliasAnalysis`` that places a coarse version's regions in the coordinates
    of the base it was merged into (its state: ``_shifted``, filled by ``merge``)."""

    def _shift(self, base: fx.Node, new: fx.Node) -> Shift | None:
        """How the regions of ``new``'s version map into ``base``'s version, when ``new`` is
        the root of a version of its own with exactly ``base``'s sizes, strides and element
        size (at another storage offset), or ``None``.

        Note [A call's value read where it was written]
        Written in place, a call's value (``new``, a v1 or PyTorch-v1 output: a fresh tensor
        with the strides of the view it replaces) becomes the memory of the view it was
        written into (``base``, ``qkv[..., 0:8]``), usually at another storage offset, so
        ``merge`` marks its version coarse: every read of it overlapped every write into the
        buffer. Its readers then read ``base`` (the rewrite replaces the value by it), and
        its element ``i`` is ``base``'s element ``i``. When the two have the same sizes,
        strides and element size, that is a constant shift of storage offsets, ``delta``
        elements, for every element of the value's root; a view of it taken by relative view
        ops (anything but ``as_strided``, whose offset is absolute, and dtype views) sits at
        its recorded offset plus ``delta`` in ``base``'s storage with its recorded sizes and
        strides. So such a read is placed exactly in the base's coordinates (``_hits``); any
        other (a read not inside the value's root, through ``as_strided``, of another element
        size, or once the base's own version turned coarse) overlaps everything, as before.
        The version stays coarse for every other query but ``may_overlap`` (two arguments of
        one call: both placed in the base's coordinates, as below; fuzz seed 20261805 #4, a
        read of ``b.select(1, 0)[3:]`` seemed to overlap the write of ``[:3]`` after a first
        call wrote ``b = x[1:]``, and ``b`` was cloned) and scatter chains.
        A call that writes ``q`` and ``k`` of one ``qkv`` needs it: the write-back scatter of
        ``q``'s value reads that value after the call, and used to keep ``k``'s clone.
        The sizes and strides may be symbolic (a token count): Note [Shifts with symbolic
        sizes] says which facts are used and how each is decided without a guard.
        """
        key = self.version[new]
        if self.root[key] is not new or len(self._members[self.memory_class(key)]) != 1:
            return None
        if self.version[base] in self._coarse:
            return None
        a, b = new.meta["val"], base.meta["val"]
        delta = static_shift(a, b)  # Note [Shifts with symbolic sizes]
        if delta is None:
            return None
        root = self.root[self.version[base]].meta["val"]
        if root.element_size() != b.element_size():
            return None
        return Shift(
            base=self.version[base],
            ends=(new, base),
            delta=delta,
            whole=self.region(new),
            root=(tuple(root.shape), tuple(root.stride()), root.storage_offset()),
            dense=is_dense_root(root),
            itemsize=root.element_size(),
        )

    def _shifted_region(self, key: Any, read: Read) -> Region | None:
        """The region of ``read`` (of coarse version ``key``) in the coordinates of the base it
        was merged into, where Note [A call's value read where it was written] places it;
        ``None`` where it cannot (the read then overlaps everything)."""
        if read.coarse:
            return None
        placed = self._placed(key, read.arg, [self._read_region(read)])
        return None if placed is None else placed[0]

    def _placed(self, key: Any, node: fx.Node, regions: list[Region]) -> list[Region] | None:
        """``regions`` (of the coarse version ``key``, read or written through ``node``) in the
        coordinates of the base that version was merged into; ``None`` where they cannot be
        placed there: a region not inside the version's root, of another element size, or of
        a node that is no chain of relative views of the root.

        Note [Written and read in two coordinates]
        Regions are in their own version's coordinates. A call's value merged into a base at
        another storage offset (a coarse version: a v2 base starts at offset 0 where the input
        ``b = x[1:]`` it replaces starts at 1, a v1 value written into ``qkv[..., 8:12]``) may
        be written again by a later call, through a view of it: the written regions are then
        in the value's coordinates. A read of the same version compares with them directly
        (one set of coordinates, and the version's elements are distinct elements of the
        base). A read of any other version of the class is compared in the base's coordinates,
        both sides placed there as Note [A call's value read where it was written] places a
        read (``_shifted_region``); a side that cannot be placed overlaps everything. Before,
        a coarse version's read was placed in the base's coordinates and the write was not
        (fuzz seed 20261350 #87: the write of ``b[0]`` at byte 0, the read of its old value at
        byte 8, so the call wrote ``b`` in place before the read), and a read of the base
        compared its own coordinates with the value's.
        """
        shift = self._shifted.get(key)
        if shift is None or shift.base in self._coarse or not relative_to(node, shift.ends):
            return None
        placed = []
        for r in regions:
            if r.geom is None or r.geom[3] != shift.itemsize or not contains(shift.whole, r):
                return None
            size, stride, off, itemsize = r.geom
            placed.append(
                region_of_geometry(
                    (size, stride, off + shift.delta), shift.root, shift.dense, itemsize
                )
            )
        return placed

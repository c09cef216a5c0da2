"""Alias analysis for functional ATen graphs: which nodes share memory, which part they cover,
and who reads it afterwards.

Modelled on TorchScript's alias analysis (see the note in ``shared/seeds``): one linear walk
builds the facts, and the re-inplace pass only *queries* them.

* A **version** is one fake storage: a placeholder, a fresh allocation, or a HOP output. View
  nodes belong to the version of their input and cover a :class:`Region` of it.
* A **memory class** groups versions that share physical memory. Initially each version is its
  own class; the pass merges a HOP's output into its base's class when it writes in place.
* **Reads**: every non-view use of a node reads its region (graph outputs included; ``copy_``
  into a placeholder reads only its source). Reads are indexed per version, sorted by position.

Imports ``views`` only (to describe regions); nothing here knows about HOP semantics.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import operator
from typing import Any, Iterable

import torch
import torch.fx as fx

from ..regions import (
    Region,
    contains,
    is_dense_root,
    is_empty,
    overlaps,
    region_of,
    region_of_geometry,
    same_geometry,
)
from ..symbolic import known
from ..views.geometry import as_int
from .targets import per_target

log = logging.getLogger("autofunc.passes.alias")

__all__ = ["AliasAnalysis", "VIEW_OPS", "SCATTER_VIEWS", "storage_address"]

# Ops whose output aliases their first input and which read nothing themselves.
VIEW_OPS = frozenset(
    {
        torch.ops.aten.alias.default,
        torch.ops.aten.as_strided.default,
        torch.ops.aten.detach.default,
        torch.ops.aten.diagonal.default,
        torch.ops.aten.expand.default,
        torch.ops.aten.permute.default,
        torch.ops.aten.select.int,
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.split.Tensor,
        torch.ops.aten.split_with_sizes.default,
        torch.ops.aten.squeeze.dim,
        torch.ops.aten.squeeze.dims,
        torch.ops.aten.t.default,
        torch.ops.aten.transpose.int,
        torch.ops.aten.unbind.int,
        torch.ops.aten.unflatten.int,
        torch.ops.aten.unfold.default,
        torch.ops.aten.unsqueeze.default,
        torch.ops.aten.view.default,
        torch.ops.aten.view.dtype,  # the same bytes as another dtype (Note [Dtype views])
        torch.ops.aten._reshape_alias.default,
        torch.ops.aten._unsafe_view.default,
        operator.getitem,  # of a split/unbind result (a tuple of views)
    }
)

# View ops whose result's storage offset is relative to their input's (as_strided's is
# absolute; a dtype view changes the unit of offsets): Note [A call's value read where it was
# written].
_SHIFTABLE_VIEWS = VIEW_OPS - {torch.ops.aten.as_strided.default, torch.ops.aten.view.dtype}

# Scatter -> the view op selecting the part of its first input that it replaces. A scatter reads
# its first input everywhere except there (Note [Scatters read around what they replace]).
SCATTER_VIEWS = {
    torch.ops.aten.select_scatter.default: torch.ops.aten.select.int,
    torch.ops.aten.slice_scatter.default: torch.ops.aten.slice.Tensor,
    torch.ops.aten.diagonal_scatter.default: torch.ops.aten.diagonal.default,
    torch.ops.aten.as_strided_scatter.default: torch.ops.aten.as_strided.default,
}

# How many reads Note [Scatter chains overwrite what they copy] looks at before it gives up.
_CHAIN_READS = 4096

# Note [wait_tensor and the tensor it waits for]
# ``_c10d_functional.wait_tensor(t)`` returns ``t`` itself at run time, but its fake value has a
# storage of its own, so the analysis gives it a version of its own. That is kept on purpose:
# functionalization does not know the two alias either, so a graph that reads ``t`` after a
# call wrote the waited tensor reads ``t``'s old value, while eager (and Inductor, which lowers
# the wait as its input) reads the new one. Writing the waited tensor in place reproduces eager,
# as PyTorch's built-in does; counting ``t`` as the same memory would clone it and return the
# functional graph's value instead. The wait itself is a read of ``t``, so nothing writes ``t``
# in place while the collective may still be writing it.

# In-place ops that only write their first argument (the epilogue of a functional graph).
_OVERWRITE_OPS = frozenset({torch.ops.aten.copy_.default})

# How a node reads its tensor arguments (``_read_kind``): a view reads nothing (its reads are
# its users'), ``copy_`` only its source, a scatter all of them (of its first input, not the
# part it replaces: ``_mask``), any other node all of them.
_READS_NOTHING, _READS_SOURCE, _SCATTERS, _READS_ALL = "view", "copy_", "scatter", "all"


@per_target  # Note [Facts per target]
def _read_kind(target: Any) -> str:
    if target in VIEW_OPS:
        return _READS_NOTHING
    if target in _OVERWRITE_OPS:
        return _READS_SOURCE
    return _SCATTERS if target in SCATTER_VIEWS else _READS_ALL


# The address of a tensor's storage (what ``untyped_storage()._cdata`` is, without making a
# storage object first); a torch without the binding reads it that way.
storage_address = getattr(torch._C, "_storage_address", None) or (
    lambda t: t.untyped_storage()._cdata
)


@dataclasses.dataclass(slots=True)
class _Read:
    pos: int
    node: fx.Node  # the reader
    arg: fx.Node  # what it reads (a view or the version's root)
    coarse: bool = False  # the region is not known in this version's coordinates
    live_until: int = 0  # position of the reader's last user (graph outputs: the output node)
    masked: bool = False  # a scatter reading its first input: not the part it replaces
    dead: bool = False  # the reader was removed from the graph (``forget``)


@dataclasses.dataclass(frozen=True, slots=True)
class _Shift:
    """Where a version merged into a base at another storage offset lies in the base's version
    (Note [A call's value read where it was written])."""

    base: Any  # the base's version, whose coordinates these are (while it is not coarse)
    ends: tuple  # the version's root and the base node: where a read's chain of views starts
    delta: Any  # the base's storage offset minus the version root's, in elements
    whole: Region  # the version root's own region (a read outside it is not placed)
    root: tuple  # the base's version root: (size, stride, offset)
    dense: bool  # is_dense_root of that root
    itemsize: int  # element size of the root, the base and the version


def _relative_to(node: fx.Node, ends: tuple) -> bool:
    """Whether ``node`` is one of ``ends`` or a chain of views with relative offsets
    (``_SHIFTABLE_VIEWS``) of one: its storage offset moves with theirs."""
    while node not in ends:
        if node.op != "call_function" or node.target not in _SHIFTABLE_VIEWS or not node.args:
            return False
        node = node.args[0]
    return True


def _static_shift(a: torch.Tensor, b: torch.Tensor) -> int | None:
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


class AliasAnalysis:
    """Facts about one graph, built in a single walk; see the module docstring.

    Attributes:
        position: topological index of every node.
        version: the version (an int naming one fake storage) of each tensor-valued node.
        root: the first node of each version (a placeholder, an allocation or a HOP output).
        reads: per version, the reads of it in graph order.
    """

    def __init__(
        self,
        graph: fx.Graph,
        late: Any = None,
    ):
        # ``late``: the backend's ``policy.LateReads`` (which nodes it may evaluate late, and
        # where it computes them at the latest); ``None``: no knowledge of which reads are late
        lazy_reader = None if late is None else late.lazy
        realizer = None if late is None else late.taken
        realizer_targets = () if late is None else late.taken_by
        self.position: dict[fx.Node, int] = {}
        self.version: dict[fx.Node, Any] = {}
        self.root: dict[Any, fx.Node] = {}
        self.reads: dict[Any, list[_Read]] = {}
        self._parent: dict[Any, Any] = {}  # union-find over versions
        self._regions: dict[fx.Node, Region] = {}  # memo of region()
        self._root_geometry: dict[Any, tuple[tuple, bool, int]] = {}  # memo of root_geometry()
        self._masks: dict[fx.Node, Region | None] = {}  # scatter -> the region it replaces
        self._reads_by: dict[fx.Node, list[_Read]] = {}  # reader -> its reads
        self._members: dict[Any, list[Any]] = {}
        self._ids: dict[int, int] = {}  # fake storage (its address) -> its version
        # Per memory class, the members a query may still find something in (Note [Exhausted
        # versions]): one list for reads_after, one for reads_before_used_after.
        self._live_later: dict[Any, list[Any]] = {}
        self._live_lazy: dict[Any, list[Any]] = {}
        self._cursor: dict[Any, int] = {}
        # Versions merged from a base whose geometry differs from its version's root: their
        # regions are in other coordinates, so every read of them counts as overlapping.
        self._coarse: set[Any] = set()
        # Coarse versions whose reads can still be placed exactly (Note [A call's value read
        # where it was written]): version -> how its coordinates map to its base's.
        self._shifted: dict[Any, _Shift] = {}
        for i, node in enumerate(graph.nodes):
            self.position[node] = i
            self._record_version(node)
        # version -> [(position, source node)] of copies that overwrite the whole version: a read
        # after one of them reads the source's value (a graph's epilogue copy-back).
        self._overwrites: dict[Any, list[tuple[int, fx.Node]]] = {}
        for node in graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default):
            dst, src = node.args[0], node.args[1]
            if dst in self.version and src in self.version and self._is_whole(dst):
                self._overwrites.setdefault(self.version[dst], []).append(
                    (self.position[node], src)
                )
        version, position, kinds = self.version, self.position, _read_kind.memo
        overwrites, reads, reads_by = self._overwrites, self.reads, self._reads_by
        for node in graph.nodes:
            if node.op == "call_function":
                known_kind = kinds.get(id(node.target))
                kind = _read_kind(node.target) if known_kind is None else known_kind[1]
                if kind is _READS_NOTHING:
                    continue
            else:
                kind = _READS_ALL
            args = node.all_input_nodes
            if kind is _READS_SOURCE:
                args = args[1:]  # copy_(dst, src) writes dst whole and reads only src
            pos = position[node]
            for arg in args:
                key = version.get(arg)
                if key is None:
                    continue
                if key in overwrites or kind is _SCATTERS:
                    key, read = self._special_read(node, arg, key, pos, kind is _SCATTERS)
                else:
                    read = _Read(pos, node, arg)
                reads[key].append(read)
                mine = reads_by.get(node)
                if mine is None:
                    reads_by[node] = [read]
                else:
                    mine.append(read)
        # When a lazily evaluated node is computed at the latest: where the first eager node
        # (or the output) needs it, through any chain of lazy users. One reverse walk; ``due``
        # holds that position for lazy nodes and -1 for eager ones (read where they stand).
        # Note [Values computed where they are taken]: a user that makes the backend compute
        # the node into a buffer of its own (``realizer``) bounds that position.
        due: dict[fx.Node, int] = {}
        position = self.position
        taken_at: dict[fx.Node, int] = {}  # node -> first user that computes it (the Note)
        for target in realizer_targets:
            for u in graph.find_nodes(op="call_function", target=target):
                if not u.users:
                    continue  # a later dead-code pass may drop it before the backend runs it
                for n in u.all_input_nodes:
                    if realizer(u, n) and position[u] < taken_at.get(n, position[u] + 1):
                        taken_at[n] = position[u]
        for n in reversed(graph.nodes):
            if lazy_reader is not None and not lazy_reader(n):
                due[n] = -1
                continue
            taken = taken_at.get(n) if taken_at else None
            at = position[n] if taken is None else taken
            for u in n.users:
                later = due[u]
                if later < 0:
                    later = position[u]
                # (a user lowered after ``taken`` reads the node's buffer)
                if later > at and (taken is None or position[u] < taken):
                    at = later
            due[n] = at
        self._due = due
        for reads in self.reads.values():
            for r in reads:
                r.live_until = due[r.node]
        self._pending: dict[Any, list[_Read]] = {}  # see reads_before_used_after
        self._pending_cursor: dict[Any, int] = {}

    # -- building -------------------------------------------------------------------------

    def _record_version(self, node: fx.Node) -> None:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return
        # Versions are small ints: the union-find and the per-version tables are keyed by them,
        # and hashing a StorageWeakRef runs Python code on every lookup. A storage is named by
        # its address (``_cdata``, what a StorageWeakRef compares): every value of the graph is
        # alive while this walk runs, so no two storages share one.
        key = self._ids.setdefault(storage_address(val), len(self._ids))
        self.version[node] = key
        if key not in self.root:
            self.root[key] = node
            self._parent[key] = key
            self._members[key] = [key]
            self.reads[key] = []

    def _is_whole(self, node: fx.Node) -> bool:
        return same_geometry(node.meta["val"], self.root[self.version[node]].meta["val"])

    def _special_read(
        self, node: fx.Node, arg: fx.Node, key: Any, pos: int, scatter: bool
    ) -> tuple[Any, _Read]:
        """The read of ``arg`` (of version ``key``) by ``node`` (at ``pos``; a scatter, per
        ``scatter``) where ``key`` has copies into it or ``node`` is a scatter, and the version
        it reads: after a copy-back, the copy's source."""
        coarse = False
        overwrites = self._overwrites.get(key)
        copies = [(p, src) for p, src in overwrites if p < pos] if overwrites else None
        if copies:
            src = max(copies, key=lambda c: c[0])[1]
            root, src_root = self.root[key], self.root[self.version[src]]
            coarse = not same_geometry(root.meta["val"], src_root.meta["val"])
            key = self.version[src]
        masked = not copies and scatter and node.args[0] is arg
        return key, _Read(pos, node, arg, coarse, masked=masked)

    def _read_region(self, read: _Read) -> Region:
        """Regions are computed on first use: most reads are never queried."""
        if read.coarse:
            return Region.everything()
        return self.region(read.arg)

    def _mask(self, read: _Read) -> Region | None:
        """The region of its first input that a scatter replaces (``None``: unknown)."""
        node = read.node
        if node not in self._masks:
            try:
                val = SCATTER_VIEWS[node.target](
                    read.arg.meta["val"], *node.args[2:], **node.kwargs
                )
                root = self.root[self.version[read.arg]].meta["val"]
                self._masks[node] = region_of(val, root)
            except Exception:  # an unexpected signature: the scatter reads everything
                log.debug("scatter %s: no region for what it replaces", node.name, exc_info=True)
                self._masks[node] = None
        return self._masks[node]

    def _hits(
        self, key: Any, read: _Read, written: list[Region], wkey: Any, placed: list[Region] | None
    ) -> bool:
        """Whether ``read`` (of version ``key``) may read an element of ``written`` (regions of
        version ``wkey``; ``placed``: the same in the base's coordinates where ``wkey`` is
        coarse, ``None`` where they cannot be placed there).

        Note [Scatters read around what they replace]
        ``select_scatter(x, src, 0, l)`` reads ``x`` everywhere but ``x[l]``: a write into
        ``x[l]`` does not change its result, so it is no reader of that old value. This is how
        the write-back of a view whose base is unknown (a dtype view has no ``_base``) reads.
        """
        if read.dead:
            return False
        coarse = self._coarse
        if (key in coarse or wkey in coarse) and key != wkey:
            # Note [Written and read in two coordinates]: both placed in the base's
            region = self._shifted_region(key, read) if key in coarse else self._read_region(read)
            if region is None or placed is None:
                return True
            return any(overlaps(region, w) for w in placed)  # (no mask there)
        region = self._read_region(read)
        mask = self._mask(read) if read.masked else None
        return any(
            overlaps(region, w)
            and not (mask is not None and contains(mask, w))
            and not (read.masked and self._copied_unread(read, w))
            for w in written
        )

    def _copied_unread(self, read: _Read, w: Region) -> bool:
        """Whether the elements ``w`` that scatter ``read.node`` copies from its first input
        into its result are overwritten there, along any chain of scatters, before anything
        reads them.

        Note [Scatter chains overwrite what they copy]
        A call writing two views of one buffer (vLLM's ``rotary_embedding(pos, q, k)`` with
        ``q, k, v = qkv.split(...)``) is written back by functionalization as a chain::

            qkv2 = slice_scatter(qkv1, q', -1, 0, 8)     # reads qkv1 outside [0, 8)
            qkv3 = slice_scatter(qkv2, k', -1, 8, 12)    # reads qkv2 outside [8, 12)

        The first scatter reads ``qkv1[..., 8:12]``, the old key, but only to copy it into
        ``qkv2[..., 8:12]``, which the second scatter replaces without reading it. A scatter's
        result is a fresh tensor whose elements outside its window are its input's, element
        for element; what it copied into elements nobody reads cannot be observed, whatever it
        was. So a write of ``w`` before the scatter changes no observable value when ``w`` is
        *unread* in the scatter's result: every read of that result's memory (its memory
        class: views of it, later scatters folded into it, calls' values written into it,
        reads through a copy-back into an input) either misses ``w``, or is a scatter that
        replaces all of ``w``, or is a scatter whose own copy of ``w`` is unread in turn. The
        question is asked per read the read rules look at ("a read the backend evaluates late", "old
        value read later"), once per written region, with a worklist over the chain; the reads
        of the result are those of the graph as it stands, so one that observes the element at
        any position counts (order is not needed: the result is fresh, nothing before it reads
        it).

        What keeps it sound: the elements are compared in one set of coordinates only, so each
        step requires the scatter's input to cover its version exactly (the same size, stride,
        offset and element size as its root) and every member of the result's memory class to
        have that geometry too (no transposed input, no view at another offset, nothing coarse
        or merged into an input); anything else counts as a read. A read whose region is not
        known (``Region.everything()``) overlaps ``w``. The walk gives up (a read) after
        ``_CHAIN_READS`` reads. Nothing is rewritten here: the scatters stay, and compute the
        same observable values from the new buffer as from the old.
        """
        ref = self.root[self.version[read.arg]].meta["val"]
        todo, seen, budget = [read], set(), _CHAIN_READS
        while todo:
            scatter = todo.pop()
            node = scatter.node
            if node in seen:
                continue
            seen.add(node)
            key = self.version.get(node)
            if (
                key is None
                or self.root.get(key) is not node
                or not same_geometry(scatter.arg.meta["val"], ref)
                or not same_geometry(node.meta["val"], ref)
            ):
                return False
            for member in self._members[self.memory_class(key)]:
                root = self.root[member]
                if (
                    member in self._coarse
                    or root.op == "placeholder"
                    or not same_geometry(root.meta["val"], ref)
                ):
                    return False
                for r in self.reads[member]:
                    if r.dead:
                        continue
                    budget -= 1
                    if budget < 0:
                        return False
                    if not overlaps(self._read_region(r), w):
                        continue
                    if not r.masked:
                        return False
                    mask = self._mask(r)
                    if mask is None or not contains(mask, w):
                        todo.append(r)  # copied on: unread only if unread in its result
        return True

    def _shift(self, base: fx.Node, new: fx.Node) -> _Shift | None:
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
        The version stays coarse for every other query (``may_overlap``, scatter chains).
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
        delta = _static_shift(a, b)  # Note [Shifts with symbolic sizes]
        if delta is None:
            return None
        root = self.root[self.version[base]].meta["val"]
        if root.element_size() != b.element_size():
            return None
        return _Shift(
            base=self.version[base],
            ends=(new, base),
            delta=delta,
            whole=self.region(new),
            root=(tuple(root.shape), tuple(root.stride()), root.storage_offset()),
            dense=is_dense_root(root),
            itemsize=root.element_size(),
        )

    def _shifted_region(self, key: Any, read: _Read) -> Region | None:
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
        if shift is None or shift.base in self._coarse or not _relative_to(node, shift.ends):
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

    def forget(self, node: fx.Node) -> None:
        """``node`` was removed from the graph: its reads no longer happen."""
        for r in self._reads_by.pop(node, ()):
            r.dead = True

    # -- queries --------------------------------------------------------------------------

    def region(self, node: fx.Node) -> Region:
        """The region of its version that ``node`` covers."""
        region = self._regions.get(node)
        if region is None:
            val = node.meta["val"]
            geom = (tuple(val.shape), tuple(val.stride()), val.storage_offset())
            region = self._regions[node] = self.region_of_geometry(node, geom)
        return region

    def region_of_geometry(
        self, node: fx.Node, geom: tuple, itemsize: int | None = None
    ) -> Region:
        """The region a view of ``node``'s value with geometry ``(size, stride, offset)`` covers
        in ``node``'s version; ``geom`` is in elements of ``itemsize`` bytes (default: those of
        ``node``'s dtype; another size for a dtype view of it)."""
        if itemsize is None:
            itemsize = node.meta["val"].element_size()
        root_geom, dense, root_itemsize = self.root_geometry(node)
        return region_of_geometry(geom, root_geom, dense, itemsize, root_itemsize)

    def root_geometry(self, node: fx.Node) -> tuple[tuple, bool, int]:
        """``(geometry, dense, itemsize)`` of the root of ``node``'s version: its (size, stride,
        offset), whether it is dense (``is_dense_root``) and its element size (computed once per
        version)."""
        key = self.version[node]
        facts = self._root_geometry.get(key)
        if facts is None:
            root = self.root[key].meta["val"]
            geom = (tuple(root.shape), tuple(root.stride()), root.storage_offset())
            facts = self._root_geometry[key] = (geom, is_dense_root(root), root.element_size())
        return facts

    def memory_class(self, key: Any) -> Any:
        while self._parent[key] != key:
            self._parent[key] = self._parent[self._parent[key]]
            key = self._parent[key]
        return key

    def input_of(self, node: fx.Node) -> fx.Node | None:
        """The graph input (placeholder) whose memory ``node``'s value lives in, or ``None``.

        Note [Values merged into an input's memory]
        A version's root is where its storage began: a view taken of a call's output before the
        pass ran (``v = out.view(2, 2)``) keeps that output's version, also after an earlier
        call was written in place and its output merged into a graph input's memory. Such a
        view *is* the input's memory from then on, so a later write into it is a write of the
        input (fuzz seed 20261255 #237). The memory class holds at most one input: merges join
        a call's fresh output to the memory it was written into, never two inputs.
        """
        if node not in self.version:
            return None
        cls = self.memory_class(self.version[node])
        for key in self._members[cls]:
            root = self.root[key]
            if root.op == "placeholder":
                return root
        return None

    def same_memory(self, a: fx.Node, b: fx.Node) -> bool:
        if a not in self.version or b not in self.version:
            return False
        return self.memory_class(self.version[a]) == self.memory_class(self.version[b])

    def may_overlap(
        self, a: fx.Node, a_regions: list[Region], b: fx.Node, b_regions: list[Region]
    ) -> bool:
        """Whether regions of two nodes' values may share memory, across versions too."""
        if not self.same_memory(a, b):
            return False
        va, vb = self.version[a], self.version[b]
        if va != vb and (va in self._coarse or vb in self._coarse):
            return True
        return any(overlaps(x, y) for x in a_regions for y in b_regions)

    def track(self, new: fx.Node, like: fx.Node) -> None:
        """Give a node inserted by the pass the version and position of ``like``."""
        self.version[new] = self.version[like]
        self.position[new] = self.position[like]

    def add_value(self, node: fx.Node, position: int, readers: Iterable[fx.Node]) -> None:
        """Record a fresh storage the pass inserted at ``position`` (``node``), read by
        ``readers`` (nodes already in the graph). Their reads count as still needed until the
        end of the graph (their lazy chains are not followed)."""
        self.position[node] = position
        self._record_version(node)
        key = self.version[node]
        end = len(self.position)  # past every position
        for r in sorted(readers, key=lambda u: self.position.get(u, position)):
            read = _Read(self.position.get(r, position), r, node, live_until=end)
            self.reads[key].append(read)
            self._reads_by.setdefault(r, []).append(read)

    def merge(self, base: fx.Node, new: fx.Node) -> None:
        """Record that ``new``'s version now lives in ``base``'s memory (an in-place write)."""
        a = self.memory_class(self.version[base])
        b = self.memory_class(self.version[new])
        if a == b:
            return
        base_root = self.root[self.version[base]].meta["val"]
        new_root = self.root[self.version[new]].meta["val"]
        # Regions are in each version's own storage coordinates. ``new``'s are those of
        # ``base``'s only when its root has exactly ``base``'s geometry, storage offset included
        # (a HOP's fresh base may sit at offset 0 where the input it replaces does not: a read
        # of its [5:6] would then seem disjoint from a write of the input's [5:6]).
        if not (
            same_geometry(base.meta["val"], base_root)
            and same_geometry(new_root, base.meta["val"])
        ):
            self._coarse.update(self._members[b])
            shift = self._shift(base, new)
            if shift is not None:
                self._shifted[self.version[new]] = shift
        if len(self._members[a]) < len(self._members[b]):
            a, b = b, a
        for live in (self._live_later, self._live_lazy):
            keep = live.pop(a, None)
            keep = list(self._members[a]) if keep is None else keep
            keep.extend(live.pop(b, None) or self._members[b])
            live[a] = keep
        self._parent[b] = a
        self._members[a].extend(self._members.pop(b))

    def written_copy(self, node: fx.Node, pos: int) -> None:
        """Record that ``node`` is a copy the pass emitted for the call at ``pos``, which
        writes it: no lazy read runs through it after ``pos``.

        Note [Copies the calls write]
        A copy the pass emits for a call (the buffer cloned, then written by the op) holds
        the op's result from that call on, not a pending value: the backend computes it into
        memory of its own by then, as the op writes that memory. The lazy nodes that fed it
        (``buf = x * 1``, cloned for a call on ``buf[:, 0]``) are then no longer read through
        it: a later call writing ``x`` does not count ``buf``'s use by the copy as a pending
        read of ``x``, and the frontier of its lazy reads (``backends/inductor/lazy_reads.py``) stops at the
        copy. Before, the copy, emitted after the analysis's walk, had no known place of
        computation, and the walk went through it to the copy's users after the later call:
        the later call then kept a clone of ``x``.
        """
        self._due[node] = pos

    def computed_by(self, node: fx.Node, pos: int) -> None:
        """Record that the backend computes ``node`` into a buffer of its own by position
        ``pos`` (a pin the pass emitted for the call there: Note [Values computed where they
        are taken]): its reads end at ``pos``, or at a user lowered before ``pos`` that computes
        it inline. Lifetimes only shrink, and never below ``pos``: no answer given before
        changes, and a later buffer of the same call sees the value computed before it."""
        due = self._due.get(node, -1)
        if due <= pos:
            return  # eager, or computed by then anyway
        at = max(self.position[node], pos)
        for u in node.users:
            p = self.position.get(u)
            # A node the pass emitted sits before the call it was emitted for, this one or an
            # earlier one, and is taken there (a view of an argument, a pin) or computed there
            # (a clone of a buffer, a value computed before the call): by ``pos`` either way.
            if p is None or p >= pos:
                continue
            later = self._due.get(u, -1)
            at = max(at, p if later < 0 else later)
        if at < due:
            self._due[node] = at
            for r in self._reads_by.get(node, ()):
                r.live_until = min(r.live_until, at)

    def computed_before(self, node: fx.Node, pos: int) -> bool:
        """Whether the analysis knows ``node``, lazy, to be computed before position ``pos``
        (Note [Values computed where they are taken])."""
        due = self._due.get(node, -1)
        return 0 <= due < pos

    def reads_before_used_after(
        self, node: fx.Node, buffer: fx.Node, written: list[Region]
    ) -> list[fx.Node]:
        """The lazy readers (``late.lazy``; any reader when none was given) that, before
        ``node``, read an element of ``written`` in ``buffer``'s memory class and whose value is
        still needed after ``node`` (a compiler that evaluates them late would see the write).

        Each version keeps the lazy reads seen so far whose value is still needed; positions
        only grow across the pass's calls, so every read enters and leaves that list once.
        """
        written = _nonempty(written)
        if written is None:
            return []  # Note [An empty write]
        pos = self.position[node]
        wkey = self.version[buffer]
        cls = self.memory_class(wkey)
        placed = self._placed(wkey, buffer, written) if wkey in self._coarse else written
        live = self._live(self._live_lazy, cls)
        exhausted, hits = [], []
        for key in live:
            reads, pending = self.reads[key], self._pending.setdefault(key, [])
            i = self._pending_cursor.get(key, 0)
            while i < len(reads) and reads[i].pos < pos:
                if reads[i].live_until > pos:
                    pending.append(reads[i])
                i += 1
            self._pending_cursor[key] = i
            pending[:] = [r for r in pending if r.live_until > pos]
            if not pending and i == len(reads):
                exhausted.append(key)
                continue
            hits.extend(r.node for r in pending if self._hits(key, r, written, wkey, placed))
        self._drop(live, exhausted)
        return list(dict.fromkeys(hits))

    def reads_after(self, node: fx.Node, buffer: fx.Node, written: list[Region]) -> list[fx.Node]:
        """The nodes after ``node`` that read, in ``buffer``'s memory class, an element of
        ``written`` through a version that already exists (an *old* value), in graph order.

        Positions only grow across the pass's calls, so each version's cursor only moves
        forward: the total work over a whole pass is linear in the number of reads.
        """
        written = _nonempty(written)
        if written is None:
            return []  # Note [An empty write]
        pos = self.position[node]
        wkey = self.version[buffer]
        cls = self.memory_class(wkey)
        placed = self._placed(wkey, buffer, written) if wkey in self._coarse else written
        hits: list[_Read] = []
        live = self._live(self._live_later, cls)
        exhausted = []
        for key in live:
            reads = self.reads[key]
            start = self._cursor.get(key, 0)
            if start < len(reads) and reads[start].pos <= pos:
                start = bisect.bisect_right(reads, pos, lo=start, key=lambda r: r.pos)
                self._cursor[key] = start
            if start == len(reads):
                exhausted.append(key)
                continue
            for i in range(start, len(reads)):
                read = reads[i]
                if self._hits(key, read, written, wkey, placed):
                    hits.append(read)
        self._drop(live, exhausted)
        hits.sort(key=lambda r: r.pos)
        return list(dict.fromkeys(r.node for r in hits))

    # Note [Exhausted versions]
    # Queries only move forward (positions grow across the pass's calls), so a member whose
    # reads all lie behind the current position (and, for lazy reads, with none pending) can
    # never answer a later query of its class. Dropping it keeps a query's cost to the members
    # with reads still ahead; without it a KV cache written in place layer after layer puts
    # every layer's version in one class, and each call would scan them all (quadratic).
    def _live(self, table: dict[Any, list[Any]], cls: Any) -> list[Any]:
        live = table.get(cls)
        if live is None:
            live = table[cls] = list(self._members[cls])
        return live

    @staticmethod
    def _drop(live: list[Any], exhausted: list[Any]) -> None:
        if exhausted:
            gone = set(exhausted)
            live[:] = [k for k in live if k not in gone]


def _nonempty(written: list[Region]) -> list[Region] | None:
    """``written`` without the regions that provably hold no element; ``None`` where it had
    regions and each is such (the call writes nothing there).

    Note [An empty write]
    A call that writes a view with a size of 0 (``x[2:2]``, ``buf[0:0, 0]``) writes no element,
    so no read, before or after it, of any version can see it. Its region still has a place
    inside the buffer's bytes (``lo == hi`` somewhere within them), and a read whose region is
    not known exactly, or a coarse version's, counted as overlapping it: the call then kept a
    clone of the buffer, or computed lazy reads before it, for nothing. The read queries drop
    such regions first (``regions.is_empty``: only a size provably 0; a symbolic size that may
    be 0 is not dropped). Only the queries about reads do: whether two mutable arguments of
    one call overlap is decided as before. A query given no regions at all is answered as
    before.
    """
    if not any(map(is_empty, written)):
        return written
    return [w for w in written if not is_empty(w)] or None

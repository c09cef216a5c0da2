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

The analysis is one class in three modules, one concern each: this one builds the facts in
named phases (versions, copy-backs, reads, when lazy reads are due) and answers the queries;
``alias_reads.py`` says whether one read may see a write (scatters included), and
``alias_shifts.py`` places a merged value's regions in its base's coordinates. What each ATen
op does to memory is ``memory_ops.py``. Imports ``views`` and ``regions`` only (to describe
regions); nothing here knows about HOP semantics.
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

import torch
import torch.fx as fx

from ..regions import (
    Region,
    is_dense_root,
    overlaps,
    region_of_geometry,
    same_geometry,
)
from .alias_reads import Read, ScatterReads, nonempty
from .alias_shifts import Shift, ShiftedVersions
from .memory_ops import (
    READS_ALL,
    READS_NOTHING,
    READS_SOURCE,
    SCATTERS,
    read_kind,
    storage_address,
)
from ..logs import get_logger

log = get_logger("autofunc.passes.alias")

__all__ = ["AliasAnalysis"]

# Note [wait_tensor and the tensor it waits for]
# ``_c10d_functional.wait_tensor(t)`` returns ``t`` itself at run time, but its fake value has a
# storage of its own, so the analysis gives it a version of its own. That is kept on purpose:
# functionalization does not know the two alias either, so a graph that reads ``t`` after a
# call wrote the waited tensor reads ``t``'s old value, while eager (and Inductor, which lowers
# the wait as its input) reads the new one. Writing the waited tensor in place reproduces eager,
# as PyTorch's built-in does; counting ``t`` as the same memory would clone it and return the
# functional graph's value instead. The wait itself is a read of ``t``, so nothing writes ``t``
# in place while the collective may still be writing it.


class AliasAnalysis(ScatterReads, ShiftedVersions):
    """Facts about one graph, built in a single walk; see the module docstring.

    Attributes:
        position: topological index of every node.
        version: the version (an int naming one fake storage) of each tensor-valued node.
        root: the first node of each version (a placeholder, an allocation or a HOP output).
        reads: per version, the reads of it in graph order.
    """

    def __init__(self, graph: fx.Graph, late: Any = None):
        """Build the facts of ``graph`` in four phases, each a method below.

        ``late``: the backend's ``policy.LateReads`` (which nodes it may evaluate late, and
        where it computes them at the latest); ``None``: no knowledge of which reads are late.
        """
        self.position: dict[fx.Node, int] = {}
        self.version: dict[fx.Node, Any] = {}
        self.root: dict[Any, fx.Node] = {}
        self.reads: dict[Any, list[Read]] = {}
        self._parent: dict[Any, Any] = {}  # union-find over versions
        self._regions: dict[fx.Node, Region] = {}  # memo of region()
        self._root_geometry: dict[Any, tuple[tuple, bool, int]] = {}  # memo of root_geometry()
        self._masks: dict[fx.Node, Region | None] = {}  # scatter -> the region it replaces
        self._reads_by: dict[fx.Node, list[Read]] = {}  # reader -> its reads
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
        self._shifted: dict[Any, Shift] = {}
        # version -> [(position, source node)] of copies that overwrite the whole version: a read
        # after one of them reads the source's value (a graph's epilogue copy-back).
        self._overwrites: dict[Any, list[tuple[int, fx.Node]]] = {}
        self._due: dict[fx.Node, int] = {}  # when each node's value is computed at the latest
        self._pending: dict[Any, list[Read]] = {}  # see reads_before_used_after
        self._pending_cursor: dict[Any, int] = {}
        self._number_versions(graph)  # 1. versions
        self._find_overwrites(graph)  # 2. copies that overwrite a whole version
        self._record_reads(graph)  # 3. reads, per version
        self._bound_reads(graph, late)  # 4. how long each read is needed

    # -- building -------------------------------------------------------------------------

    def _number_versions(self, graph: fx.Graph) -> None:
        """Phase 1: every node's position, and a version per fake storage."""
        for i, node in enumerate(graph.nodes):
            self.position[node] = i
            self._record_version(node)

    def _find_overwrites(self, graph: fx.Graph) -> None:
        """Phase 2: the ``copy_`` nodes that overwrite a whole version (a copy-back)."""
        for node in graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default):
            dst, src = node.args[0], node.args[1]
            if dst in self.version and src in self.version and self._is_whole(dst):
                self._overwrites.setdefault(self.version[dst], []).append(
                    (self.position[node], src)
                )

    def _record_reads(self, graph: fx.Graph) -> None:
        """Phase 3: every read of every version, in graph order (Note [Facts per target] for
        the read kinds)."""
        version, position, kinds = self.version, self.position, read_kind.memo
        overwrites, reads, reads_by = self._overwrites, self.reads, self._reads_by
        for node in graph.nodes:
            if node.op == "call_function":
                known_kind = kinds.get(id(node.target))
                kind = read_kind(node.target) if known_kind is None else known_kind[1]
                if kind is READS_NOTHING:
                    continue
            else:
                kind = READS_ALL
            args = node.all_input_nodes
            if kind is READS_SOURCE:
                args = args[1:]  # copy_(dst, src) writes dst whole and reads only src
            pos = position[node]
            for arg in args:
                key = version.get(arg)
                if key is None:
                    continue
                if key in overwrites or kind is SCATTERS:
                    key, read = self._special_read(node, arg, key, pos, kind is SCATTERS)
                else:
                    read = Read(pos, node, arg)
                reads[key].append(read)
                mine = reads_by.get(node)
                if mine is None:
                    reads_by[node] = [read]
                else:
                    mine.append(read)

    def _bound_reads(self, graph: fx.Graph, late: Any) -> None:
        """Phase 4: when each node is computed at the latest (``_due``), and so until when each
        read of it is needed (``Read.live_until``)."""
        lazy_reader = None if late is None else late.lazy
        realizer = None if late is None else late.taken
        realizer_targets = () if late is None else late.taken_by
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
    ) -> tuple[Any, Read]:
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
        return key, Read(pos, node, arg, coarse, masked=masked)

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
            # both sides in the base's coordinates (Note [Written and read in two coordinates])
            a_regions = self._placed(va, a, a_regions) if va in self._coarse else a_regions
            b_regions = self._placed(vb, b, b_regions) if vb in self._coarse else b_regions
            if a_regions is None or b_regions is None:
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
            read = Read(self.position.get(r, position), r, node, live_until=end)
            self.reads[key].append(read)
            self._reads_by.setdefault(r, []).append(read)

    def merge(self, base: fx.Node, new: fx.Node) -> None:
        """Record that ``new``'s version now lives in ``base``'s memory (an in-place write)."""
        a = self.memory_class(self.version[base])
        b = self.memory_class(self.version[new])
        if a == b:
            return
        new_root = self.root[self.version[new]].meta["val"]
        # Regions are in each version's own storage coordinates, in bytes: ``new``'s are those
        # of ``base``'s only when its root has exactly ``base``'s geometry, storage offset
        # included (a HOP's fresh base may sit at offset 0 where the input it replaces does not),
        # whatever ``base``'s own root is (Note [A base merged into a view of its root]).
        if not same_geometry(new_root, base.meta["val"]):
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
        read of ``x``, and the frontier of its lazy reads (``backends/inductor/lazy_reads.py``)
        stops at the copy. Before, the copy, emitted after the analysis's walk, had no known
        place of computation, and the walk went through it to the copy's users after the later
        call: the later call then kept a clone of ``x``.
        """
        self._due[node] = pos

    def computed_by(
        self, node: fx.Node, pos: int, moved: bool = False, pinned: bool = False
    ) -> None:
        """Record that the backend computes ``node`` into a buffer by ``pos`` (Note [Values
        computed where they are taken]): its reads end at ``pos``, or at a user lowered before
        ``pos`` computing it inline (not a view of a ``pinned`` node, computed where lowered:
        20261928 #112). Lifetimes only shrink, never below ``pos``: no answer given before
        changes, a later buffer of the same call sees it computed, also one ``moved`` there."""
        due = self._due.get(node, -1)
        if due <= pos:
            return  # eager, or computed by then anyway
        at = pos - 0.5 if moved else max(self.position[node], pos)
        for u in node.users:
            p = self.position.get(u)
            # A node the pass emitted sits before the call it was emitted for, this one or an
            # earlier one, and is taken there (a view of an argument, a pin) or computed there
            # (a clone of a buffer, a value computed before the call): by ``pos`` either way.
            if p is None or p >= pos or (pinned and read_kind(u.target) == READS_NOTHING):
                continue
            later = self._due.get(u, -1)
            at = max(at, p if later < 0 else later)
        if at < due:
            self._due[node] = at
            for r in self._reads_by.get(node, ()):
                r.live_until = min(r.live_until, at)

    def computed_before(self, node: fx.Node, pos: int) -> bool:
        """Whether the analysis knows ``node``, lazy, to be computed before position ``pos``."""
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
        written = nonempty(written)
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
        written = nonempty(written)
        if written is None:
            return []  # Note [An empty write]
        pos = self.position[node]
        wkey = self.version[buffer]
        cls = self.memory_class(wkey)
        placed = self._placed(wkey, buffer, written) if wkey in self._coarse else written
        hits: list[Read] = []
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

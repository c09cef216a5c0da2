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
import operator
from typing import Any, Iterable

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef

from .. import views

__all__ = ["Region", "AliasAnalysis", "VIEW_OPS", "overlaps"]

# Ops whose output aliases their first input and which read nothing themselves.
VIEW_OPS = frozenset(
    {
        torch.ops.aten.alias.default,
        torch.ops.aten.as_strided.default,
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
        torch.ops.aten._reshape_alias.default,
        torch.ops.aten._unsafe_view.default,
        operator.getitem,  # of a split/unbind result (a tuple of views)
    }
)

# In-place ops that only write their first argument (the epilogue of a functional graph).
_OVERWRITE_OPS = frozenset({torch.ops.aten.copy_.default})


def _known(cond: Any) -> bool:
    return cond if isinstance(cond, bool) else statically_known_true(cond)


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


def _region(val: torch.Tensor, root_val: torch.Tensor) -> Region:
    size, stride, off = tuple(val.shape), tuple(val.stride()), val.storage_offset()
    if any(_known(s == 0) for s in size):
        return Region(off, off)
    hi = off + 1 + sum((s - 1) * abs(st) for s, st in zip(size, stride))
    root = (tuple(root_val.shape), tuple(root_val.stride()), root_val.storage_offset())
    if not _dense_root(root_val):
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


def _dense_root(val: torch.Tensor) -> bool:
    """Distinct indices of the root address distinct elements (no stride-0 / overlap)."""
    return all(_known(st != 0) or _known(s <= 1) for s, st in zip(val.shape, val.stride()))


def _same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    return _same_root(
        (tuple(a.shape), tuple(a.stride()), a.storage_offset()),
        (tuple(b.shape), tuple(b.stride()), b.storage_offset()),
    )


@dataclasses.dataclass
class _Read:
    pos: int
    node: fx.Node
    region: Region


class AliasAnalysis:
    """Facts about one graph, built in a single walk; see the module docstring.

    Attributes:
        position: topological index of every node.
        version: the version (a ``StorageWeakRef``) of each tensor-valued node.
        root: the first node of each version (a placeholder, an allocation or a HOP output).
        reads: per version, the reads of it in graph order.
    """

    def __init__(self, graph: fx.Graph):
        self.position: dict[fx.Node, int] = {}
        self.version: dict[fx.Node, Any] = {}
        self.root: dict[Any, fx.Node] = {}
        self.reads: dict[Any, list[_Read]] = {}
        self._parent: dict[Any, Any] = {}  # union-find over versions
        self._members: dict[Any, list[Any]] = {}
        self._cursor: dict[Any, int] = {}
        # Versions merged from a base whose geometry differs from its version's root: their
        # regions are in other coordinates, so every read of them counts as overlapping.
        self._coarse: set[Any] = set()
        for i, node in enumerate(graph.nodes):
            self.position[node] = i
            self._record_version(node)
        for node in graph.nodes:
            for arg in self._read_args(node):
                self._record_read(node, arg)

    # -- building -------------------------------------------------------------------------

    def _record_version(self, node: fx.Node) -> None:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return
        key = StorageWeakRef(val.untyped_storage())
        self.version[node] = key
        if key not in self.root:
            self.root[key] = node
            self._parent[key] = key
            self._members[key] = [key]
            self.reads[key] = []

    def _read_args(self, node: fx.Node) -> Iterable[fx.Node]:
        if node.op == "call_function" and node.target in VIEW_OPS:
            return ()
        args = node.all_input_nodes
        if node.target in _OVERWRITE_OPS:
            args = args[1:]  # copy_(dst, src) writes dst whole and reads only src
        return [a for a in args if a in self.version]

    def _record_read(self, node: fx.Node, arg: fx.Node) -> None:
        key = self.version[arg]
        self.reads[key].append(_Read(self.position[node], node, self.region(arg)))

    # -- queries --------------------------------------------------------------------------

    def region(self, node: fx.Node) -> Region:
        """The region of its version that ``node`` covers."""
        root = self.root[self.version[node]]
        return _region(node.meta["val"], root.meta["val"])

    def region_of_val(self, node: fx.Node, val: torch.Tensor) -> Region:
        """The region ``val`` (a view of ``node``'s value) covers in ``node``'s version."""
        root = self.root[self.version[node]]
        return _region(val, root.meta["val"])

    def memory_class(self, key: Any) -> Any:
        while self._parent[key] is not key:
            self._parent[key] = self._parent[self._parent[key]]
            key = self._parent[key]
        return key

    def same_memory(self, a: fx.Node, b: fx.Node) -> bool:
        if a not in self.version or b not in self.version:
            return False
        return self.memory_class(self.version[a]) is self.memory_class(self.version[b])

    def track(self, new: fx.Node, like: fx.Node) -> None:
        """Give a node inserted by the pass the version and position of ``like``."""
        self.version[new] = self.version[like]
        self.position[new] = self.position[like]

    def merge(self, base: fx.Node, new: fx.Node) -> None:
        """Record that ``new``'s version now lives in ``base``'s memory (an in-place write)."""
        a = self.memory_class(self.version[base])
        b = self.memory_class(self.version[new])
        if a is b:
            return
        base_root = self.root[self.version[base]].meta["val"]
        if not _same_geometry(base.meta["val"], base_root):
            self._coarse.update(self._members[b])
        if len(self._members[a]) < len(self._members[b]):
            a, b = b, a
        self._parent[b] = a
        self._members[a].extend(self._members.pop(b))

    def first_read_after(
        self, node: fx.Node, buffer: fx.Node, written: list[Region]
    ) -> fx.Node | None:
        """The first node after ``node`` that reads, in ``buffer``'s memory class, an element of
        ``written`` through a version that already exists (an *old* value), or ``None``.

        Positions only grow across the pass's calls, so each version's cursor only moves
        forward: the total work over a whole pass is linear in the number of reads.
        """
        pos = self.position[node]
        cls = self.memory_class(self.version[buffer])
        hit: _Read | None = None
        for key in self._members[cls]:
            reads = self.reads[key]
            start = self._cursor.get(key, 0)
            if start < len(reads) and reads[start].pos <= pos:
                start = bisect.bisect_right(reads, pos, lo=start, key=lambda r: r.pos)
                self._cursor[key] = start
            coarse = key in self._coarse
            for i in range(start, len(reads)):
                read = reads[i]
                if coarse or any(overlaps(read.region, w) for w in written):
                    if hit is None or read.pos < hit.pos:
                        hit = read
                    break
        return None if hit is None else hit.node

"""How one read of the alias analysis meets a write: :class:`Read`, and :class:`ScatterReads`,
the part of ``AliasAnalysis`` (alias.py) that says whether a read may see written elements,
scatters (which read around what they replace, and whose copies a later scatter may overwrite
unread) included.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.fx as fx

from ..regions import Region, contains, is_empty, overlaps, region_of, same_geometry
from .memory_ops import SCATTER_VIEWS
from ..logs import get_logger

__all__ = ["CHAIN_READS", "Read", "ScatterReads", "nonempty"]

log = get_logger("autofunc.passes.alias")

# How many reads Note [Scatter chains overwrite what they copy] looks at before it gives up.
CHAIN_READS = 4096


@dataclasses.dataclass(slots=True)
class Read:
    pos: int
    node: fx.Node  # the reader
    arg: fx.Node  # what it reads (a view or the version's root)
    coarse: bool = False  # the region is not known in this version's coordinates
    live_until: int = 0  # position of the reader's last user (graph outputs: the output node)
    masked: bool = False  # a scatter reading its first input: not the part it replaces
    dead: bool = False  # the reader was removed from the graph (``forget``)


class ScatterReads:
    """The part of ``AliasAnalysis`` that answers whether one read may see a write (its state:
    ``_masks``, the memo of what each scatter replaces)."""

    def _read_region(self, read: Read) -> Region:
        """Regions are computed on first use: most reads are never queried."""
        if read.coarse:
            return Region.everything()
        return self.region(read.arg)

    def _mask(self, read: Read) -> Region | None:
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
        self, key: Any, read: Read, written: list[Region], wkey: Any, placed: list[Region] | None
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

    def _copied_unread(self, read: Read, w: Region) -> bool:
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
        ``CHAIN_READS`` reads. Nothing is rewritten here: the scatters stay, and compute the
        same observable values from the new buffer as from the old.
        """
        ref = self.root[self.version[read.arg]].meta["val"]
        todo, seen, budget = [read], set(), CHAIN_READS
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


def nonempty(written: list[Region]) -> list[Region] | None:
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

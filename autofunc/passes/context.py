"""The types every phase of the re-inplace pass shares (Note [Pipeline] in ``reinplace.py``):
what one run of the pass knows (:class:`Pass`), one mutable buffer of a call and the regions it
writes (:class:`Buffer`, :func:`written_regions`), what one decision looks at (:class:`Query`)
and a rule's consent on a condition (:class:`Provided`).

A leaf of the pass: it imports the alias analysis and the emitter's fake-value helper, none of
the phases (facts, rules, scatters, the rewrite, the policy), so every phase imports it and no
import circle runs through it (``tests/test_layers.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .. import views
from ..hops.adapter import Mutation
from ..regions import Region
from ..symbolic import is_plain, plain_fields
from .alias import AliasAnalysis
from .emit import fake_values

__all__ = ["Buffer", "Pass", "Provided", "Query", "SavedTensors", "written_regions"]


@dataclasses.dataclass
class Pass:
    """What one run of the pass knows: the analysis and the facts gathered before rewriting."""

    gm: fx.GraphModule
    analysis: AliasAnalysis
    epilogue: dict[fx.Node, fx.Node]  # placeholder -> copy_(placeholder, new)
    outputs: list[fx.Node]  # tensors the graph returns
    fake_mode: FakeTensorMode
    enable: bool
    training: bool
    # the backend's behaviours the pass respects: a ``policy.Policy`` (policy.py imports this
    # module, so the annotation names no class)
    policy: Any
    # graph inputs some call writes in place (Note [Returned values of written inputs])
    written_inputs: set[fx.Node] = dataclasses.field(default_factory=set)
    # positions of the outputs AOTAutograd regenerates from inputs (Note [Outputs AOTAutograd
    # regenerates from inputs]), read once
    regenerated: frozenset[int] = frozenset()
    # the forward's saved tensors, where known (Note [Saved values of written inputs])
    saved: SavedTensors | None = None
    # what the copies ``emit`` inserts now are made for (``copies.copying``)
    copying_for: tuple | None = None
    # (call, buffer, graph input) for each kept clone a repair replaced by the input its value
    # is copied into (Note [A buffer copied into an input is the input]), for the report
    into_inputs: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class SavedTensors:
    """Where a training forward graph returns the tensors it saves for the backward, and the
    list of those the backward may reuse the memory of (AOTAutograd's ``bw_donated_idxs``,
    shared with the backward's compile: dropping an index keeps that tensor's memory)."""

    positions: range  # of the graph's flat outputs
    first_index: int  # the donated index of the tensor at ``positions[0]``
    donated: list[int]

    def donated_index(self, position: int) -> int:
        return self.first_index + position - self.positions.start


# -- step 3a: what each call writes -----------------------------------------------------------


@dataclasses.dataclass
class Buffer:
    """One mutable buffer of a call: a v2 base or a v1 mutable tensor, and its output slot."""

    node: fx.Node
    # the key of the HOP's output that holds its copy (``Mutation.output_keys(i)[0]``)
    out_index: Any
    args: list[str]  # labels of the mutable arguments regenerated from it
    chains: list[views.ViewChain]  # the chain of each, relative (Note [Relative chains])
    written: list[Region] | None = None  # memo of written_regions()
    # the chains of the read-only arguments regenerated from it (Note [Read arguments see the
    # written memory] in hops/v2.py): they write nothing, and they alias what the others write
    read_chains: list[views.ViewChain] = dataclasses.field(default_factory=list)


def written_regions(analysis: AliasAnalysis, buf: Buffer) -> list[Region]:
    """The regions of ``buf``'s version that the op may write (computed once per buffer)."""
    if buf.written is None:
        val = buf.node.meta["val"]
        geom = (tuple(val.shape), tuple(val.stride()), val.storage_offset())
        buf.written = [_written(analysis, buf.node, val, geom, c) for c in buf.chains]
    return buf.written


def _written(
    analysis: AliasAnalysis, node: fx.Node, val: Any, geom: tuple, chain: views.ViewChain
) -> Region:
    """The region of ``node``'s version that ``chain`` applied to ``node`` (value ``val``,
    geometry ``geom``) covers.

    Note [Written regions memoized]
    A decoder asks this for every layer with the same chain (one object: ``decode_views``
    shares the chains of a plain wire), the same buffer geometry and the same root geometry, a
    different layer's cache but the same numbers. Where all of them are ints (no SymInt, no
    node in the chain's steps) the answer is a pure function of those ints and the dtype, kept
    per chain object: the chain holds its own memo, so it lives exactly as long as the chain.
    """
    root = analysis.root_geometry(node)
    plain = all(is_plain(x) for x in (*geom, *root[0]))
    key = (geom, val.dtype, root) if plain else None
    memo = chain.__dict__.get("_written_memo") if key is not None else None
    if memo is not None:
        region = memo.get(key)
        if region is not None:
            return region
    itemsize = val.element_size()
    region = analysis.region_of_geometry(
        node,
        _values(chain).shifted(geom[2]).geometry(*geom, itemsize=itemsize),
        chain.dtype(val.dtype).itemsize,  # Note [Dtype views]: regions are in bytes
    )
    if key is not None and all(plain_fields(s) for s in chain.steps):
        if memo is None:
            memo = {}
            object.__setattr__(chain, "_written_memo", memo)  # a frozen dataclass's own memo
        if len(memo) < 64:
            memo[key] = region
    return region


def _values(chain: views.ViewChain) -> views.ViewChain:
    """A chain read off graph kwargs holds symbolic values as nodes; use their fake values."""
    if not any(_holds_node(s) for s in chain.steps):
        return chain

    def fake(x: Any) -> Any:
        return fake_values(x)

    steps = tuple(
        type(s)(**{f.name: fake(getattr(s, f.name)) for f in dataclasses.fields(s)})
        for s in chain.steps
    )
    return views.ViewChain(steps)


def _holds_node(step: Any) -> bool:
    return any(
        isinstance(x, fx.Node)
        or (isinstance(x, (list, tuple)) and any(isinstance(y, fx.Node) for y in x))
        for x in vars(step).values()
    )


# -- step 3b: what one decision looks at ------------------------------------------------------


@dataclasses.dataclass
class Query:
    """What one decision looks at: a buffer of a call, and the pass's facts about it."""

    ctx: Pass
    node: fx.Node  # the HOP call
    m: Mutation
    buf: Buffer
    bufs: list[Buffer]  # every buffer of the call, ``buf`` among them
    inplace: tuple[Buffer, ...] = ()  # the buffers of the call already written in place
    copies: tuple[fx.Node, ...] = ()  # the copies of its buffers already cloned, which it writes
    # what an earlier rule made its consent depend on (set by ``decide`` only): "old value
    # read later" adds the reads "a read the backend evaluates late" moves to its own
    provided: Provided | None = None

    @functools.cached_property
    def root(self) -> fx.Node:
        analysis = self.ctx.analysis
        return analysis.root[analysis.version[self.buf.node]]

    @functools.cached_property
    def written(self) -> list[Region]:
        return written_regions(self.ctx.analysis, self.buf)

    @functools.cached_property
    def reads_after(self) -> list[fx.Node]:
        """The readers of an old value of the written memory after the call, for the analysis
        (``AliasAnalysis.reads_after``): asked by two rules, computed once."""
        return self.ctx.analysis.reads_after(self.node, self.buf.node, self.written)

    def written_here(self, node: fx.Node) -> bool:
        """Whether ``node`` now denotes memory this call writes (a buffer of the call decided
        before this one: written in place, or the copy it was cloned into): after the call it
        names the new value.

        A copy counts as much as a buffer written in place (fuzz seed 20261351 #3: in
        ``m3way(r2, a, r2)`` under Inductor, ``r2`` was cloned, then ``a`` written in place
        with the lazy reads of ``a`` computed before the call, and the clone, fed by them and
        used after the call as the op's result, was computed before the call as a pending read
        of ``a``: its later user read the clone's value before the op wrote it)."""
        analysis = self.ctx.analysis
        return (
            node in self.copies
            or any(analysis.same_memory(node, c) for c in self.copies)
            or any(analysis.same_memory(node, b.node) for b in self.inplace)
        )


@dataclasses.dataclass(frozen=True)
class Provided:
    """A rule's consent on a condition: in place, provided ``realize`` is done first: a plan of
    the policy's (``Policy.plan_realization``, ``Policy.plan_move_back``: the lazy values
    computed before the call, Notes [Lazy reads computed before the call], [Reads moved back
    before the call]) that ``Policy.realize`` carries out. ``readers``: the reads it covers."""

    realize: Any
    readers: tuple[fx.Node, ...] = ()

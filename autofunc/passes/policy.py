"""What the re-inplace pass must respect about the backend that lowers the graph it rewrites.

A policy is an object the pass asks, at each point where backends differ: the rules ask it what
the backend evaluates late and how it lays out buffers, the planning step asks it which copy a
cloned buffer gets (and whether that copy reads a pin of its source) and whether a buffer
written in place is pinned, the rewrite has it compute
late reads before a call, make fresh aliases and declare hidden writes, and the pass runs its
repairs before the facts and after the rewrite (Note [Pipeline] in ``reinplace.py``).

:class:`Policy` is the protocol, and its own answers are the generic ones: a backend that runs
the graph as it stands (eager ATen, ``aot_eager``, ``torch.export``), where every node runs at
its place and every tensor has the strides the graph records; :data:`GENERIC` is its instance.
Inductor's policy is ``InductorPolicy`` (``INDUCTOR``) in ``autofunc/backends/inductor/``,
the folder that holds every piece of Inductor knowledge the pass uses. A new backend
subclasses :class:`Policy`, overrides what its backend does differently, and passes an
instance to ``reinplace``.

Imports nothing of the pass but its shared types (``context.py``) and the emitter, so every
phase may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch import fx

from ..hops.adapter import Mutation
from ..symbolic import contiguous_or_false, known, overlaps_itself
from .context import Buffer, Pass, Query
from .emit import CloneKind, emit

__all__ = ["GENERIC", "LateReads", "Policy"]

_aten = torch.ops.aten


class Policy:
    """The backend behaviours the pass respects; this class answers for a backend that runs the
    graph as it stands. Subclass it for another backend and override what differs."""

    # The name reports and warnings show.
    name: ClassVar[str] = "generic"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"

    # -- what the rules respect (Note [Pipeline] step 3b) --------------------------------------

    def chooses_layout(self, node: fx.Node) -> bool:
        """Whether the backend lays out the buffer ``node`` as it likes, whatever strides the
        graph records (rule "a layout the backend chooses", Note [Layouts Inductor chooses]).
        Here: never, every tensor has the strides the graph records."""
        return False

    def rewrites_root(self, node: fx.Node) -> bool:
        """Whether the backend may give the root of ``node``'s views memory laid out otherwise
        than the graph records, even through a pin (rule "a layout the backend chooses", Note
        [A pinned scatter Inductor rewrites]). Here: never."""
        return False

    def takes_any_layout(self, q: Query) -> bool:
        """Whether the op may take the buffer ``q`` decides through views in whatever layout
        the backend gives its root, where the rule "a layout the backend chooses" would clone
        it: nothing reinterprets the root with the recorded strides and no one observes the
        write (Note [A write no one reads] in backends/inductor/policy.py). Here: never."""
        return False

    def must_fold_scatters(self, buf: fx.Node) -> bool:
        """Whether ``buf``, a view of a graph input written in place, needs every scatter that
        writes it back into its input to fold, else it keeps its clone (rule "graph input:
        copied back, not returned", Note [Views of graph inputs]). Here: no, the backend runs
        a scatter that stays as it stands."""
        return False

    def late_reads(self) -> LateReads | None:
        """Which nodes the backend may evaluate later than their place in the graph, where a
        write made after them is visible to them (rule "a read the backend evaluates late"),
        and where it computes them at the latest; ``None``: every node runs where it stands,
        that rule never objects and nothing is computed before a call. Here: ``None``."""
        return None

    # -- facts (Note [Pipeline] step 2) ---------------------------------------------------------

    def outputs_regenerated(self, positions: frozenset[int]) -> frozenset[int]:
        """Of the graph's outputs AOTAutograd's runtime wrapper regenerates from the inputs
        (``positions``, Note [Outputs AOTAutograd regenerates from inputs] in facts.py), those
        it still regenerates where this backend runs the graph. Here: all of them."""
        return positions

    # -- repairs (Note [Pipeline] steps 1 and 5) ------------------------------------------------

    def repairs_before(self) -> Sequence[Callable[[fx.Graph], Any]]:
        """Graph rewrites run before the facts are gathered, in order, each given the graph."""
        return ()

    def repairs_after(self) -> Sequence[Callable[[Pass], Any]]:
        """Graph rewrites run after every call is rewritten, in order, each given the pass's
        context (``Pass``)."""
        return ()

    # -- realize: late reads computed before a call (rules "a read the backend evaluates late",
    # "old value read later") -------------------------------------------------------------------

    def plan_realization(self, q: Query, readers: list[fx.Node]) -> Any:
        """How to compute, before the call, the values ``readers`` (lazy nodes before the call
        whose results are used after it) need, instead of cloning ``q.buf``: a plan with an
        ``nbytes`` cost that :meth:`realize` carries out, or ``None``. Only asked where
        :meth:`late_reads` is not ``None``."""
        return None

    def plan_move_back(self, q: Query, later: list[fx.Node], readers: list[fx.Node]) -> Any:
        """How to move the reads ``later`` (after the call; ``readers``: every read of what it
        writes) back before the call and compute them there, instead of cloning ``q.buf``: a
        plan as :meth:`plan_realization`'s, or ``None`` (here: reads run where they stand)."""
        return None

    def realize(self, ctx: Pass, call: fx.Node, plan: Any) -> None:
        """Carry out ``plan`` (one of this policy's) just before ``call``."""
        raise NotImplementedError(f"the {self.name} policy made no realization plan")

    # -- copy and pin (the planning step, Note [Clones for Inductor]) ---------------------------

    def copy(
        self, ctx: Pass, node: fx.Node, buf: Buffer | None = None, m: Mutation | None = None
    ) -> CloneKind:
        """Which copy of ``node`` the pass emits (``emit.emit_clone``): of a buffer ``buf``
        of the call ``m`` that keeps its clone, or (``buf`` ``None``) of a value returned
        whole. Here: exactly the recorded strides, which the backend keeps (``empty_strided``
        + ``copy_`` where ``clone`` would not keep them); a computed value that overlaps itself
        densely, and a graph input that does into a span (no ``copy_`` can write such strides:
        Note [A buffer that overlaps itself])."""
        val = node.meta["val"]
        if overlaps_itself(val):
            return CloneKind.DENSE if node.op != "placeholder" else CloneKind.SPAN
        if contiguous_or_false(val):
            return CloneKind.CLONE
        # a stride that may be 0 over a size that may exceed 1: ``copy_`` may refuse to write it
        zero = any(
            not known(st != 0) and not known(n <= 1) for n, st in zip(val.shape, val.stride())
        )
        return CloneKind.SPAN if zero else CloneKind.EMPTY_COPY

    def copy_for(self, q: Query) -> CloneKind:
        """The copy of the buffer the rules decided to clone (``q``): ``copy`` of it, unless
        the query tells the backend more."""
        return self.copy(q.ctx, q.buf.node, q.buf, q.m)

    def pin_source(self, ctx: Pass, node: fx.Node, call: fx.Node) -> bool:
        """Whether the copy of ``node`` kept for ``call`` reads a pinned alias of ``node``
        (``pin_layout``) rather than ``node`` itself, so the backend stores ``node`` once for the
        copy and for the nodes after the call that read it. Here: never, the backend stores
        every node."""
        return False

    def pin(self, q: Query) -> bool:
        """Whether the op takes a pinned alias of ``q.buf``, written in place (``pin_layout``),
        rather than the buffer itself. Here: never, the backend keeps every layout."""
        return False

    def pin_root(self, ctx: Pass, buf: fx.Node) -> None:
        """After ``buf`` is written in place (and its scatters folded): pin the root of its
        views where the backend would copy a view of it. Here: nothing to pin."""

    # -- the direct call ------------------------------------------------------------------------

    def read_view(self, ctx: Pass, target: Any, args: tuple) -> fx.Node:
        """One step (``target(*args)``, an ATen view) of the view a read-only argument gets of a
        buffer the call writes (Note [Read arguments see the written memory] in hops/v2.py):
        it must stay a view of that memory. Here: the step itself."""
        return emit(ctx, target, args)

    def alias(self, ctx: Pass, node: fx.Node) -> fx.Node:
        """A new tensor object over ``node``'s memory, for the second and later identical
        arguments of a call (Note [Arguments keep their identity] in hops/common.py)."""
        return emit(ctx, _aten.alias.default, (node,))

    def declare_writes(
        self, ctx: Pass, written: list[fx.Node], call: fx.Node | None = None, num_returns: int = 0
    ) -> None:
        """Declare, just before a call (``call`` ``None``) and just after it (``call``, with
        ``num_returns`` op outputs), that it writes ``written``, for a call whose writes the
        backend cannot see (``Mutation.declared_writes``). Here: the backend runs the graph in
        its order, nothing to declare."""


    # -- done (Note [Pipeline] step 6) -----------------------------------------------------------

    def lint(self, graph: fx.Graph) -> None:
        """Check the rewritten graph. Here: ``graph.lint()`` (a backend that lints after its
        own passes, as Inductor does, need not)."""
        graph.lint()


class LateReads(NamedTuple):
    """A backend's late evaluation, as the alias analysis needs it (``Policy.late_reads``)."""

    # ``lazy(node)``: whether the backend may compute ``node`` later than its place
    lazy: Callable[[fx.Node], bool]
    # ``taken(user, node)``: whether the backend, where it evaluates ``user``, computes the lazy
    # ``node`` into a buffer of its own at the latest (Note [Values computed where they are
    # taken] in backends/inductor/policy.py); ``None``: no such knowledge, nothing is bounded
    taken: Callable[[fx.Node, fx.Node], bool] | None = None
    taken_by: tuple[Any, ...] = ()  # the targets of the users ``taken`` can hold for


# The backend runs the graph as it stands: no lazy reads, layouts as recorded, no repairs.
GENERIC = Policy()

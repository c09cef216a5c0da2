"""Inductor's policy for the re-inplace pass (:class:`InductorPolicy`, ``INDUCTOR``): the
answers of the protocol of ``autofunc/passes/policy.py`` for Inductor. What Inductor evaluates
lazily (``evaluation.py``), and the late reads computed before a call instead of a clone
(``lazy_reads.py``); the copies and pins its layout choices need (Note [Clones for Inductor]);
the two ops it needs emitted (``ops.py``); its repairs (``repairs.py``). The glue (``glue.py``)
passes ``INDUCTOR`` to ``reinplace``. Imports the pass's steps but not ``reinplace.py``, nor
any Inductor configuration.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from torch import fx

from ...hops.adapter import Mutation, mutation_targets
from ...passes.context import Buffer, Pass, Query, written_regions
from ...passes.emit import CloneKind, emit, pin_layout
from ...passes.facts import aliased_args
from ...passes.memory_ops import VIEW_OPS
from ...passes.policy import LateReads, Policy
from ...passes.walks import users_through_views, view_root, view_walk
from ...regions import same_geometry
from ...symbolic import contiguous_or_false, nbytes_hint, overlaps_itself
from .constants import rematerialize_constant_reads
from .copy_backs import copy_backs_where_computed
from .input_buffers import inputs_as_buffers, regenerated_outputs_of_inputs
from .input_scatters import scatters_into_inputs
from .evaluation import (
    LATE_READS,
    computed_where_taken,
    lazy_kind,
    lazy_under_inductor,
    pin_keeps_layout,
    pinnable_root,
    pinnable_value,
    reshape_view,
    storage_chain,
    storage_root,
)
from .lazy_reads import (
    Realization,
    affordable,
    plan_hoist,
    plan_realization,
    plan_users_hoisted,
    realize_before,
)
from .ops import DTYPE_VIEW, FRESH_ALIAS, WRITTEN
from .reads_apart import realize_reads_apart
from .taken_views import views_of_values_taken_later
from .repairs import REPAIRS_AFTER, REPAIRS_BEFORE

__all__ = ["INDUCTOR", "InductorPolicy", "computed_where_taken", "lazy_under_inductor"]

_aten = torch.ops.aten

class InductorPolicy(Policy):
    """What Inductor does that the pass must respect (each answer names its Note)."""

    name: ClassVar[str] = "inductor"

    def chooses_layout(self, node: fx.Node) -> bool:
        # Note [Layouts Inductor chooses]; not where the pass pins the root (Note [A pinned
        # root keeps its layout])
        return node.op != "placeholder" and not pinnable_root(node)

    def rewrites_root(self, node: fx.Node) -> bool:
        # Note [A pinned scatter Inductor rewrites]
        return not pin_keeps_layout(storage_root(node))

    def must_fold_scatters(self, buf: fx.Node) -> bool:
        return True  # Note [Views of graph inputs]

    def late_reads(self) -> LateReads:
        # Notes [Lazy reads under Inductor], [Values computed where they are taken]
        return LATE_READS

    def lint(self, graph: fx.Graph) -> None:
        pass  # Inductor lints the graph itself after its post-grad passes

    def outputs_regenerated(self, positions: frozenset[int]) -> frozenset[int]:
        # AOTInductor compiles ahead of time: its wrapper regenerates no output from the inputs
        from torch._inductor.virtualized import V

        return frozenset() if V.aot_compilation else positions

    def repairs_before(self) -> Sequence[Callable[[fx.Graph], Any]]:
        # Notes [Copies back where their value is computed] in copy_backs.py, [A constant read
        # apart from the write] in constants.py
        return (*REPAIRS_BEFORE, copy_backs_where_computed, rematerialize_constant_reads)

    def repairs_after(self) -> Sequence[Callable[[Pass], Any]]:
        # Notes [A buffer copied into an input is the input] (input_buffers.py), [A scatter
        # into an input written in place] (input_scatters.py) first: the repairs after them
        # see the input
        return (
            inputs_as_buffers,
            scatters_into_inputs,
            regenerated_outputs_of_inputs,  # Note [Regenerated outputs taken from the input]
            views_of_values_taken_later,  # Note [A view of a value a later call takes whole]
            *REPAIRS_AFTER,
            realize_reads_apart,  # Note [A write that reads its own memory elsewhere]
        )

    # -- realize: Notes [Lazy reads computed before the call], [Reads moved back before the
    # call] in lazy_reads.py ---------------------------------------------------------------------

    def plan_realization(self, q: Query, readers: list[fx.Node]) -> Realization | None:
        pending, outputs = self._pending(q), q.ctx.outputs
        clone = nbytes_hint(q.buf.node.meta.get("val"))
        plain = plan_realization(
            q.node, readers, outputs, pending, written_here=q.written_here, pinnable=pinnable_value
        )
        if plain is None or (plain.nbytes == 0 and plain.live == 0):
            return plain
        # Note [Users of the frontier moved back before the call]
        hoisted = plan_users_hoisted(
            q.node, plain, readers, outputs, pending, q.written_here, pinnable_value
        )
        # Note [Values alive across the call]
        return affordable(hoisted, clone) or affordable(plain, clone)

    @staticmethod
    def _pending(q: Query) -> Callable[[fx.Node], bool]:
        """Lazy nodes not known to be computed before the call (Note [Values computed where
        they are taken]): the frontier does not run through one that is."""
        analysis, pos = q.ctx.analysis, q.ctx.analysis.position[q.node]
        return lambda n: lazy_under_inductor(n) and not analysis.computed_before(n, pos)

    def plan_move_back(
        self, q: Query, later: list[fx.Node], readers: list[fx.Node]
    ) -> Realization | None:
        # the reads an earlier rule's condition covers count as reads before the call
        moved = q.provided.readers if q.provided is not None else ()
        earlier = [*moved, *(r for r in readers if r < q.node and lazy_under_inductor(r))]
        plan = plan_hoist(
            q.node,
            later,
            earlier,
            q.ctx.outputs,
            self._pending(q),
            q.written_here,
            pinnable_value,
        )
        return affordable(plan, nbytes_hint(q.buf.node.meta.get("val")))

    def realize(self, ctx: Pass, call: fx.Node, plan: Realization) -> None:
        realize_before(ctx, call, plan, storage_chain)

    # -- copy and pin -----------------------------------------------------------------------------

    def copy(
        self, ctx: Pass, node: fx.Node, buf: Buffer | None = None, m: Mutation | None = None
    ) -> CloneKind:
        """A span copy wherever Inductor's layout choice could disagree with the recorded
        strides (Note [Clones for Inductor] in emit.py).

        Note [A contiguous clone pinned]
        A contiguous buffer that aliasing arguments share is copied with ``aten.clone`` and
        pinned (``CloneKind.DENSE_PINNED``), not into a span: a contiguous clone has the
        recorded strides, and the pin fixes them before the arguments' views are taken. Inductor
        then computes the clone into the buffer of a source no one reads later, where the
        span's ``full`` + scatter needs memory of its own (fuzz seed 20261702 #53:
        ``m3way(r, r, r)`` on a cumsum read later, 96 B over PyTorch's built-in).

        Note [A clone the op takes through views]
        A contiguous clone the op takes through a view (``view(clone(r0), [1, 1])``) is a
        buffer Inductor has not computed when it lowers the call: as for a buffer written in
        place (Note [Views of unrealized buffers under Inductor]), it computes the view's
        elements into a buffer of its own for the op and the clone again for its other users
        (the value the graph returns), one allocation more. The clone is pinned, so Inductor
        computes it once and hands the op a view of it (fuzz seeds 20261909 #227 and
        20261906 #255: 8 B over PyTorch's built-in, whose clone is of an ``as_strided``
        view)."""
        aliased = buf is not None and m is not None and self._aliased(ctx, buf, m)
        direct = buf is not None and all(c.is_alias for c in buf.chains)
        val = node.meta["val"]
        if overlaps_itself(val) and node.op != "placeholder":
            return CloneKind.DENSE_PINNED if aliased or not direct else CloneKind.DENSE
        if contiguous_or_false(val):
            # shared by aliasing arguments: one fixed layout, a pin of the clone (Note [A
            # contiguous clone pinned]); taken through views: pinned too (Note [A clone the op
            # takes through views])
            return CloneKind.DENSE_PINNED if aliased or not direct else CloneKind.CLONE
        if direct and not aliased and node.op == "call_function" and node.target in VIEW_OPS:
            return CloneKind.EMPTY_COPY
        return CloneKind.SPAN

    def copy_for(self, q: Query) -> CloneKind:
        """``copy`` for the buffer ``q`` decided to clone; a clone pinned only because the op
        takes it through views is not pinned where no one reads what the call writes into it
        (Note [A write no one reads]: Inductor then computes the views' elements alone, as for
        a buffer written in place; fuzz seed 20261927 #150, a slice of an expanded ``iota``
        cloned whole: 240 B over PyTorch's built-in)."""
        kind = self.copy(q.ctx, q.buf.node, q.buf, q.m)
        if kind is not CloneKind.DENSE_PINNED or self._aliased(q.ctx, q.buf, q.m):
            return kind
        if not _write_unobserved(q):
            return kind
        val = q.buf.node.meta["val"]
        return CloneKind.DENSE if overlaps_itself(val) else CloneKind.CLONE

    def takes_any_layout(self, q: Query) -> bool:
        """Where no one reads what the call writes (Note [A write no one reads]), the op takes
        the buffer's views as Inductor lays out their root, unpinned, through no ``as_strided``
        step: Inductor computes each view's elements, reading the values the graph records,
        and hands the op them or the root's memory, whose write no one sees (fuzz seed 20261930
        #226: a slice of a scatter into a permuted product, cloned into a span as a layout
        Inductor chooses: 192 B over PyTorch's built-in, which passes the slice)."""
        chains = (*q.buf.chains, *q.buf.read_chains)
        return (
            not any(c.uses_as_strided for c in chains)
            and _write_unobserved(q)
            and not self.pin(q)
        )

    def pin_source(self, ctx: Pass, node: fx.Node, call: fx.Node) -> bool:
        # Note [A lazy source read after its clone]
        return contiguous_or_false(node.meta["val"]) and _lazy_source_read_later(node, call)

    def pin(self, q: Query) -> bool:
        ctx, buf, m = q.ctx, q.buf, q.m
        return (
            self._aliased(ctx, buf, m)
            or (
                self._views_of_unrealized(buf)
                and (not _write_unobserved(q) or _into_a_dying_input(buf.node))
            )
            or self._unfixed_root(buf.node)
        )

    @staticmethod
    def _unfixed_root(node: fx.Node) -> bool:
        """Whether ``node`` is a root whose recorded strides Inductor would not keep unless
        pinned (Note [A pinned root keeps its layout]): taken whole by the op, whose call fixes
        its layout, but also read by another node, which may come before the call (Note [A
        layout fixed after it was used]). A view's root is pinned by ``pin_root``."""
        val = node.meta.get("val")
        return (
            isinstance(val, torch.Tensor)
            and not contiguous_or_false(val)
            and view_root(node) is node
            and not reshape_view(node)
            and pinnable_root(node)
            and any(
                u.op == "call_function"
                and u.target not in VIEW_OPS
                and u.target not in mutation_targets()
                for u in users_through_views(node)
            )
        )

    @staticmethod
    def _aliased(ctx: Pass, buf: Buffer, m: Mutation) -> bool:
        """Whether ``buf`` needs one fixed layout (Note [Clones for Inductor] in emit.py): its
        aliasing arguments do, and so does every buffer of a call that fixes no layout itself
        (Note [Region operands keep no computed layout] in hops/subgraph.py)."""
        return not m.fixes_layouts or aliased_args(buf, written_regions(ctx.analysis, buf))

    @staticmethod
    def _views_of_unrealized(buf: Buffer) -> bool:
        """Whether to pin the layout of a buffer written in place through views.

        Note [Views of unrealized buffers under Inductor]
        When the op takes a view (``buf[1]``) of a buffer Inductor has not computed yet
        (``x + 1``), Inductor computes that view's elements into a buffer of their own for the
        op, one more allocation of the view's size, and then the buffer itself. An
        ``as_strided`` alias of the whole buffer makes Inductor compute the buffer once, with
        exactly its strides, and hand the op a view of it. Graph inputs are computed already.
        Where nothing reads what the op writes, the buffer itself is not needed and no pin is
        (Note [A write no one reads]).
        """
        chains = [*buf.chains, *buf.read_chains]
        return buf.node.op != "placeholder" and not all(c.is_alias for c in chains)

    def pin_root(self, ctx: Pass, buf: fx.Node) -> None:
        """Make the chain of views ``buf`` starts from a buffer Inductor has not computed yet
        start from a pinned alias of it instead (``pin_layout``).

        Note [A written view of an unrealized buffer]
        Under v1 the buffer of ``op(r1.narrow(0, 0, 2))``, with ``r1 = a.sum(2) * 0.5``, is the
        narrow itself, and under v2 a base can be a view of a computed value too. Written in
        place, the op takes that view as it is, and Inductor computes a view of a buffer it has
        not realized into a buffer of the view's elements only: the op writes that copy and
        ``r1`` never sees the write (fuzz seed 20261263 #26; PyTorch's built-in is wrong the
        same way). An ``as_strided`` alias of the whole root with its own geometry makes
        Inductor compute the root once, in place, and every view of the alias is then a view
        of that memory. Only the root is pinned, never a view: a pinned view of a graph input
        can lose its offset (the attempt that pinned the view itself broke fuzz seeds 20261267
        #84 and 20261268 #20). Roots Inductor computes at their place (an extern kernel, an
        op's output, a graph input) are left as they are, and so are roots with an unbacked
        size: with the pin, Inductor gave a wrong result for ``op(x, x.nonzero().float()[:])``
        under v1 (the conformance program ``af_recompile_unbacked``: strides ``(1, u0)``),
        which is right without it. Roots of backed symbolic sizes (a dynamic token count) are
        pinned: left unpinned, ``op(x); x[0].mul_(2); op(x[1])`` under v1 with dynamic shapes
        had Inductor compute the row into a buffer of its own for the op and then the whole
        scatter into another (112 B for a 48 B input, PyTorch's built-in 96 B), where the
        static program writes the input in place (48 B, its returned clone).
        """
        nodes = list(view_walk(buf))
        while reshape_view(nodes[-1]):  # Note [A reshape that views its input]
            nodes += view_walk(nodes[-1].args[0])
        *chain, root = nodes
        if any(v.meta.get("autofunc.pin") for v in chain):
            return  # pinned already
        if not chain or not pinnable_root(root):
            return
        first = chain[-1]  # the view of the root
        with ctx.gm.graph.inserting_before(first):
            pinned = pin_layout(ctx, root)
        first.replace_input_with(root, pinned)

    # -- the direct call --------------------------------------------------------------------------

    def read_view(self, ctx: Pass, target: Any, args: tuple) -> fx.Node:
        # Note [A dtype view Inductor keeps] in ops.py: only to another element size
        if target is torch.ops.aten.view.dtype and _other_element_size(*args):
            return emit(ctx, DTYPE_VIEW, args)
        return emit(ctx, target, args)

    def alias(self, ctx: Pass, node: fx.Node) -> fx.Node:
        # Note [A fresh alias Inductor keeps] in ops.py
        if _reinterpreted_per_use(node):
            return node
        return emit(ctx, FRESH_ALIAS, (node,))

    def declare_writes(
        self, ctx: Pass, written: list[fx.Node], call: fx.Node | None = None, num_returns: int = 0
    ) -> None:
        # Note [Writes Inductor cannot see] in ops.py
        if not written:
            return
        after = [] if call is None else _tensor_outputs(ctx, call, num_returns)
        emit(ctx, WRITTEN, (written, after), val=None)


def _reinterpreted_per_use(node: fx.Node) -> bool:
    """Whether Inductor hands every use of ``node`` to an extern kernel as a tensor object of
    its own: a view of a graph input with another shape, which it passes as a
    ``reinterpret_tensor`` made where it is used.

    Note [Views Inductor passes as objects of their own]
    ``v = b.unsqueeze(0); op(v[:, :, 0:3], v)``: eager passes two objects over one memory, and
    Inductor, which lowers both to one view of ``b`` with ``v``'s shape, passes a
    ``reinterpret_tensor(b, ...)`` call for each argument: two objects already. A fresh alias
    for the second (Note [A fresh alias Inductor keeps] in ops.py) is an extern kernel of its
    own, whose output Inductor's memory planner counts as a buffer (fuzz seed 20261915 #27:
    8 B over PyTorch's built-in, which passes the two ``reinterpret_tensor`` calls). Only a view
    with another shape than a buffer whose layout is fixed, a graph input or a pinned value
    (``r = a.sum() * 1.5; v = r.view(1); op(v, r.flatten())``, the pass's pin of ``r`` under the
    views: fuzz seed 20261916 #231): a view with the buffer's geometry is passed as the buffer
    itself, the one object twice, and a view of a buffer Inductor lays out itself may be
    computed into a buffer of its own for the call."""
    val = node.meta.get("val")
    fixed = next(
        (
            n
            for n in view_walk(node)
            if n is not node and (n.op == "placeholder" or n.meta.get("autofunc.pin"))
        ),
        None,
    )
    fixed_val = fixed.meta.get("val") if fixed is not None else None
    return (
        isinstance(val, torch.Tensor)
        and isinstance(fixed_val, torch.Tensor)
        and tuple(val.shape) != tuple(fixed_val.shape)
    )


def _other_element_size(x: fx.Node, dtype: torch.dtype) -> bool:
    """Whether ``x.view(dtype)`` reads ``x`` with another element size (or ``x``'s is not
    known)."""
    val = x.meta.get("val") if isinstance(x, fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return True
    return val.dtype.itemsize != dtype.itemsize


def _write_unobserved(q: Query) -> bool:
    """Whether nothing can observe what the call writes into ``q.buf``: no output of the call
    holds it for a later user, no other node uses the buffer's root or a view of it after the
    call (nor returns it), and no other argument of the call shares that memory.

    Note [A write no one reads]
    ``r = o.sum(0) * 0.5; op(r.narrow(0, 2, 1))`` with ``r`` used nowhere else: the op's write
    into ``r`` is dead. The pin of Note [Views of unrealized buffers under Inductor] makes
    Inductor compute all of ``r`` so that the write lands in it; left out, Inductor computes
    the view's elements alone into a buffer of their own and hands the op that (fuzz seed
    20261706 #117: 8 B over PyTorch's built-in, which does so). The op reads the same values,
    and, with no other argument in that memory, sees the aliasing it sees in eager.
    """
    call, buf = q.node, q.buf
    root = view_root(buf.node)
    if root.op == "placeholder" or len(buf.chains) != 1 or buf.read_chains:
        return False
    if any(view_root(b.node) is root for b in q.bufs if b is not buf):
        return False
    keys = set(q.m.output_keys(q.bufs.index(buf)))
    held = (u for u in call.users if u.target is operator.getitem and u.args[1] in keys)
    if any(u.users for u in held):
        return False
    return all(u is call or u < call for u in users_through_views(root))


def _into_a_dying_input(node: fx.Node) -> bool:
    """Whether Inductor computes the pointwise ``node`` into the memory of an input that dies
    there, so that a pin of ``node`` costs nothing where the write is unobserved (Note [A write
    no one reads]): an extern kernel's result (computed, not lazy: no fused value, and not a
    graph input, which Inductor never reuses) of ``node``'s dtype and geometry that ``node``
    alone uses; Inductor's memory planning hands a buffer freed there to the next allocation
    of its size. Unpinned, a gappy view's elements take a buffer of the view's span (fuzz seed
    20261932 #20: ``o = mret(b, b); v = o.diagonal(0, 1, 2)[:, 1:2]; o.mul_(2);
    m3way(b, v, b)``, 488 B over PyTorch's built-in, whose ``as_strided`` computes ``o * 2``
    into ``o``'s buffer)."""
    target, val = node.target, node.meta.get("val")
    if not (
        isinstance(target, torch._ops.OpOverload)
        and torch.Tag.pointwise in target.tags
        and isinstance(val, torch.Tensor)
    ):
        return False
    return any(
        a.op == "call_function"
        and len(a.users) == 1
        and not lazy_kind(a)
        and isinstance(v := a.meta.get("val"), torch.Tensor)
        and v.dtype == val.dtype
        and same_geometry(v, val)
        for a in node.all_input_nodes
    )


def _tensor_outputs(ctx: Pass, call: fx.Node, n: int) -> list[fx.Node]:
    """The tensor outputs of ``call`` (``getitem``s of it, or the call itself), which the
    declaration after it takes so that the call stays even when nothing else uses them (Note
    [Writes Inductor cannot see] in ops.py)."""
    val = call.meta.get("val")
    if isinstance(val, torch.Tensor):
        return [call]
    if not isinstance(val, (tuple, list)):
        return []
    return [
        emit(ctx, operator.getitem, (call, i), val=v)
        for i, v in enumerate(val[:n])
        if isinstance(v, torch.Tensor)
    ]


INDUCTOR = InductorPolicy()


def _lazy_source_read_later(node: fx.Node, call: fx.Node) -> bool:
    """Whether ``node``, cloned for ``call``, is a value Inductor computes lazily that a node
    after the call reads (its old value).

    Note [A lazy source read after its clone]
    ``r0 = a.amax() + a.mean(); r1 = r0.amax() + r0.mean(); op(r0, a); return r0 * r1, r1 *
    -2``: ``r0``'s old value is read after the call, so ``r0`` keeps its clone. Inductor
    computes the clone from the two reductions and, ``r0`` itself never being stored,
    computes ``r0`` again from them after the call: both stay alive across it, 8 B over
    PyTorch's built-in (fuzz seed 20261913 #222), whose clone reads an ``as_strided`` of the
    value (its base regenerated), which makes Inductor store ``r0`` once, before the call, for
    the clone and the later readers alike. The clone of such a value (contiguous; the clone
    of aliased arguments too, pinned as ever) reads a pin of it (``pin_source``: ``pin_layout``,
    Note [A pinned root keeps its layout] in evaluation.py): only a root Inductor lays out
    itself, and only where a node after the call reads it; a value only the clone and earlier
    nodes read is left for Inductor to compute into the clone directly (fuzz seed 20261906
    #248: a pin stored ``b * 2`` beside its clone, 960 B over)."""
    return (
        node.op == "call_function"
        and view_root(node) is node
        and not reshape_view(node)
        and lazy_under_inductor(node)
        and pinnable_root(node)
        and any(u > call for u in users_through_views(node))
    )

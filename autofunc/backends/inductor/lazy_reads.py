"""Lazy reads computed before a call instead of a clone of the buffer: Inductor's policy's
``plan_realization``, ``plan_move_back`` and ``realize`` (``policy.py``), the only
importer of this module; under a policy without lazy readers nothing here runs.

Note [Lazy reads computed before the call]
Inductor computes a pointwise node (or a small reduction) where its value is first needed, so
a value read from a buffer before a call and used after it may be computed after the call
wrote the buffer in place. Inductor's own guard does not cover an opaque op: lowering the op's
mutation realizes the pending readers of the buffer (``GraphLowering.mark_buffer_mutated``),
but only after the op's kernel is registered, and registration order is scheduling order, so
they land after the write. The rule "a read the backend evaluates late" therefore cloned the buffer
(``Reason.LAZY_READ``).

A cheaper repair makes Inductor compute those values before the call. The *frontier* is what
must exist before the call: starting from the readers of the written elements, the lazy nodes
before the call that they feed, kept where one of their users is at or after the call (the
output included). For each frontier node ``f``::

    e = empty_like(f); c = copy_(e, f)      # just before the call
    ... uses of f after the call read c ...

Inductor lowers ``copy_`` into a buffer it allocated by computing ``f`` into a buffer of its
own right there and renaming it (``mutate_to``'s fast path: no copy, no second allocation), and
orders the call's write after that read (a write after read of a realized buffer). Uses before
the call keep ``f`` and read that same buffer.

It pays when the frontier is smaller than the buffer: a frontier node the graph returns costs
nothing (Inductor computes it into the output buffer anyway), nor does one the call itself
takes whose other later users are calls or the output (Inductor computes the op's argument
before the call into a buffer of its own anyway, and computes it once for the copy and the op:
``s = (a + r).sum() * r; op(r, s); op2(r, s)``, fuzz seed 20261703 #61, cloned ``r``), any
other its size. A node the call takes and a lazy node reads later costs its size: with the
clone, that reader recomputes it from the memory the call did not write, and the buffer the op
was given dies at the call (fuzz seed 20261906 #248: ``b.mul_(2); t = b + 0.25; op([a, b],
t); return t * b`` kept ``t`` alive across the call, where PyTorch's built-in computes ``t * b``
into the buffer of its dead copy of ``t``; 960 B over). The rule picks the repair only when it
costs strictly less than the clone; otherwise the clone stays.

Note [Reads moved back before the call]
Inductor's ``reorder_for_locality`` (before the post-grad passes) moves a pure node down to just
before its first user, so ``old = buf.sum(); op(buf); return buf + old`` reaches the pass with
the sum after the call: a read of the old value later (rule "old value read later"). In a
functional graph the read may as well run before the call, where its inputs all exist: such
readers (pure ATen nodes of the kinds below, with the inputs they need that also sit after the
call) move back to just before the call, in their order, and then count as lazy reads before it:
their frontier is computed there. Scatters into an input are never moved (Inductor re-inplaces
a scatter into the input it is copied back to, where it stands; Note [A scatter into the
frontier after the call]), nor anything random, mutating, or a later call. The move is tried
twice, the readers alone and with every lazy user they make computable before the call (a
reduction of a read makes a smaller frontier), and the cheaper plan is taken, again only when
it costs less than the clone. A moved reader the plan pins is computed there, before the call,
though the analysis keeps it at its old place (``AliasAnalysis.computed_by(..., moved=True)``):
the call's later buffers, and later calls, do not count it a pending read (fuzz seed 20261931
#291, ``o = mlret(a, a); r = o * a; m2(o, a, a)`` with ``r`` read after: ``r`` moved back and
pinned for ``o``, then counted lazy for ``a``, which was copied; 480 B over the built-in).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import torch
from torch import fx

from ...hops.adapter import mutation_targets, read_node
from ...passes.emit import emit, pin_layout
from ...passes.memory_ops import VIEW_OPS
from ...passes.walks import users_through_views, view_root
from ...symbolic import nbytes_hint
from .evaluation import restrided_for_a_later_region
from .frontier import cut_at_inputs, pins_where_taken, views_instead
from .repairs import INPLACEABLE

_aten = torch.ops.aten

__all__ = [
    "Realization",
    "affordable",
    "plan_hoist",
    "plan_realization",
    "plan_users_hoisted",
    "realize_before",
]


class Realization(NamedTuple):
    """The lazy values to compute before a call, and what that costs in bytes; ``moved``: the
    readers to move back before the call first (Note [Reads moved back before the call])."""

    nodes: tuple[fx.Node, ...]
    nbytes: int
    moved: tuple[fx.Node, ...] = ()
    # of ``nodes``, those computed through a pin rather than a copy (Note [A realized value a
    # later call writes])
    pinned: tuple[fx.Node, ...] = ()
    # of ``nodes``, those copied where they stand, every user reading the copy (Note [A
    # frontier cut at its inputs])
    in_place: tuple[fx.Node, ...] = ()
    # the bytes of ``nodes`` that cost nothing in ``nbytes`` (returned, or pinned for a later
    # call) but are alive across the call, which does not read them (Note [Values alive across
    # the call])
    live: int = 0

    def __str__(self) -> str:  # the report's detail of a buffer written in place on it
        moved = ", ".join(n.name for n in self.moved)
        names = ", ".join(n.name for n in self.nodes) or "nothing"
        before = f"{moved} moved before the call; " if moved else ""
        return f"{before}{names} computed before the call, {self.nbytes} B"


def plan_realization(
    call: fx.Node,
    readers: Iterable[fx.Node],
    outputs: Iterable[fx.Node],
    is_lazy: Any,
    moved: tuple[fx.Node, ...] = (),
    written_here: Any = None,
    pinnable: Any = None,
) -> Realization | None:
    """The frontier of ``readers`` at ``call`` (see the Note): the lazy nodes before ``call``
    (or ``moved`` there) reachable from the readers through lazy users, that have a user at
    or after ``call``; ``None`` when one of them is no tensor (a tuple: its elements are what
    is used).

    ``written_here(node)`` (as for ``plan_hoist``): a node in memory this call writes in place
    is a buffer of the call, computed before it as its argument; its users after the call read
    the value the call writes there, so it is no pending read of the old value, and neither
    it nor what it leads to is part of the frontier (fuzz seed 20261261 #200: ``r0`` read
    ``b``, ``m2(r0, b, b)`` wrote both, and ``r0``'s later user was pointed at a copy of its
    old value)."""
    frontier: dict[fx.Node, None] = {}
    early = set(moved)
    here = written_here if written_here is not None else (lambda n: False)
    seen, todo = set(readers), [r for r in readers if not here(r)]
    while todo:
        n = todo.pop()
        for u in n.users:
            if here(u):
                continue  # its later users read what the call writes (the docstring)
            if u is call:
                continue  # the call realizes what it takes before it runs
            if u.op == "output" or (u > call and u not in early):
                frontier[n] = None
            elif is_lazy(u) and u not in seen:
                seen.add(u)
                todo.append(u)
    if not all(isinstance(n.meta.get("val"), torch.Tensor) for n in frontier):
        return None
    returned = set(outputs)
    # one the call takes costs nothing where no later user reads it lazily (the Note)
    taken = {  # and one whose memory is returned (Note [A value the call takes, returned
        # through views])
        n
        for n in frontier
        if call in n.users
        and (all(_not_lazy(u, call) for u in n.users) or _returned_through_views(n))
    }
    later = {n for n in frontier if _written_by_a_later_call(n, call)}
    at_roots, roots_cost = {}, 0
    if pinnable is not None:  # Note [A value the call takes, pinned for its later readers]
        at_roots, roots_cost = pins_where_taken(
            frontier, call, returned | taken | later, returned, pinnable
        )
    views = views_instead(frontier, call, early, here, returned, {*at_roots, *taken})
    if views:
        moved = tuple(sorted({*moved, *views}))
        later |= {v for v in views if _written_by_a_later_call(v, call)}
    pinned = tuple(sorted(n for n in frontier if n in later))
    if pinned and (pinnable is None or not all(pinnable(n) for n in pinned)):
        return None  # Note [A realized value a later call writes]
    pinned = tuple(sorted({*pinned, *at_roots}))
    if any(restrided_for_a_later_region(n, call) for n in frontier if n not in pinned):
        return None  # (a pin keeps the node's strides)
    # a node pinned for a later call costs nothing: that call takes it as a buffer, which
    # Inductor computes into memory of its own anyway (only earlier); a root pinned for the
    # call costs its size, counted once for its nodes
    free = returned.union(pinned).union(taken)
    in_place = cut_at_inputs(frontier, seen, set(readers), call, early, here, free)
    # a copy that a scatter after the call writes into is copied again by that scatter (Note
    # [A scatter into the frontier after the call])
    cost = roots_cost + sum(
        nbytes_hint(n.meta["val"]) * (2 if _scattered_into(n, call) else 1)
        for n in frontier
        if n not in free
    )
    live = sum(  # Note [Values alive across the call]
        nbytes_hint(n.meta["val"])
        for n in frontier
        if (n in returned or n in pinned) and call not in n.users and n not in at_roots
    )
    return Realization(tuple(sorted(frontier)), cost, moved, pinned, in_place, live)


def affordable(plan: Realization | None, clone_nbytes: int) -> Realization | None:
    """``plan`` where it keeps no more bytes alive across the call than the clone it saves
    does; else ``None``.

    Note [Values alive across the call]
    A plan's cost (``nbytes``) counts what it allocates beyond the clone: nothing for a value
    the graph returns, which Inductor computes into the output buffer wherever it stands, nor
    for one a later call writes, which it computes for that call anyway. Both are computed
    before the call, though, and stay alive across it, where the clone would be; the clone
    plan computes them after it, possibly into memory the call freed. ``r5 = r3.sum() * 0.5;
    t4 = arange(8) + r5; op(r5, r5, ones(8)); op2(t4, ...); return r5, t4``: computing the
    returned ``t4`` (64 B) before the call to save an 8-byte clone of ``r5`` kept both 64-byte
    tensors alive at the call, and ``t4`` could not reuse the buffer of ``ones(8)``, dead after
    it: 56 B over PyTorch's built-in, which clones ``r5`` (fuzz seed 20261912 #26). So such
    free values of a plan (``live``; not those the call reads itself, which Inductor computes
    before the call anyway) are also no larger than the clone: ``r2 = a * t; op(a); return
    r2`` still computes the returned ``r2`` before the call where it is no larger than ``a``
    (fuzz seed 20261910 #130)."""
    if plan is None or plan.live > clone_nbytes:
        return None
    return plan


def _not_lazy(u: fx.Node, call: fx.Node) -> bool:  # (a user that reads no pending value)
    return u <= call or u.op == "output" or u.target in mutation_targets()


def _returned_through_views(node: fx.Node) -> bool:
    """Whether the graph returns ``node`` or a view of it (through a chain of views).

    Note [A value the call takes, returned through views]
    ``t = o + 0.25; op(o, t); v = t.as_strided(...); r = v * 1; return v[:, 0:2]``: a node the
    call takes costs nothing to compute before the call where no later user reads it lazily
    (Note [Lazy reads computed before the call]); a lazy reader after the call would keep its
    buffer alive across the call, where the clone would let it die there. A node whose memory
    the graph returns (a view of it) is alive to the end anyway: its later readers read the
    buffer Inductor computes it into for the call, which the call does not write, at no cost.
    Counting them made the plan cost ``t``'s size, as much as the clone of ``o``, which stayed
    (fuzz seed 20261920 #252: 288 B over PyTorch's built-in)."""
    return any(u.op == "output" for u in users_through_views(node))


def _scattered_into(node: fx.Node, call: fx.Node) -> bool:
    """Whether a scatter (``INPLACEABLE``) after ``call`` writes into ``node``.

    Note [A scatter into the frontier after the call]
    ``t = a[1:3] * 1; v7, v8 = t.split([1, 1]); op(a, ...); v8.mul_(-1); return v7[0][2:]``:
    the frontier of ``t``'s read of ``a`` is ``t`` (the scatter of ``v8``'s new value into it
    comes after the call) and ``v8``. Computed into a copy before the call, ``t`` also made
    Inductor compute that scatter into a buffer of its own: it re-inplaces a scatter only into
    a buffer it realizes anyway (``should_reinplace_scatter``), which a copy is not, where
    without the copy it computes ``t`` inside the scatter's kernel. So a frontier node a later
    scatter writes into costs twice its size, and the plan that moves the scatter back before
    the call (Note [Reads moved back before the call]; a scatter into a value the graph
    computes moves as a pure node does, never one into an input or a call's value, which
    Inductor may re-inplace into the input where it stands) computes the scatter alone there,
    as PyTorch's built-in does (fuzz seed 20261920 #95: a clone of ``a``, 120 B over the
    built-in)."""
    return any(u > call and u.target in INPLACEABLE and u.args[0] is node for u in node.users)


def _written_by_a_later_call(node: fx.Node, call: fx.Node) -> bool:
    """Whether a mutation node after ``call`` writes ``node`` (or a view of it) as a buffer.

    Note [A realized value a later call writes]
    The realized copy of a frontier node (``copy_(empty_like(f), f)``) is what every later
    user reads, a later call's buffer too. When that call writes it in place, Inductor's
    scheduler fails on the graph (``KeyError: 'op8'`` in ``compute_ancestors``: the buffer
    ``copy_`` lowers into an ``empty_like`` by renaming depends on itself once a fallback kernel
    mutates it; fuzz seed 20261279 #278, ``r5 = v * -2; m1(v, r5); g = v * 0.5 + r5.mean();
    m3way(g, g, r5)`` under v2, also before the realization had this check). Such a frontier
    node is computed through a pin instead, where it is a root Inductor lays out itself
    (``pinnable``): an ``as_strided`` alias of it with its own geometry, just before the call,
    which its later users read. Inductor computes a node that an ``as_strided`` takes where it
    lowers that node (Note [Values computed where they are taken] in policy.py), so before the
    call, into a buffer of its own that the later call then writes in place, with no renaming
    (``r5 = a * -2; op(a, r5); op2(r5, r5.t()); return r5``: fuzz seed 20261701 #129 kept a
    240 B clone of ``a``, PyTorch's built-in none). Any other such frontier is not realized: the
    call keeps its clone (``LAZY_READ``). A frontier node that is a ``reshape`` viewing its input
    (Note [A reshape that views its input]) is pinned at the root of its reshapes, which are
    taken again from the pin for its later users (fuzz seeds 20261609 #40 and 20261701 #18:
    ``r1.view(2, 3).mul_(0.5)`` made the value a later call writes such a reshape, and the first
    call kept a clone of ``b``, 88 B and 288 B over the built-in).
    """
    return any(
        u > call
        and u.op == "call_function"
        and u.target in mutation_targets()
        and (m := read_node(u)) is not None
        and any(view_root(b) is node for b in m.buffers)
        for u in users_through_views(node)
    )


# Ops a reader may be moved back before the call as (pure, deterministic, never re-inplaced by
# Inductor): pointwise ops, views, factories (no tensor input: ``arange``, ``full``), and these;
# a ``reshape`` as a view is (fuzz seed 20261910 #130: ``r = a * torch.arange(54.).view(3, 6,
# 3)``, moved after the call by Inductor's reordering, kept a 432 B clone of ``a``).
_MOVABLE = frozenset(
    {
        _aten.reshape.default,
        _aten.sum.default,
        _aten.sum.dim_IntList,
        _aten.mean.default,
        _aten.mean.dim,
        _aten.amax.default,
        _aten.amin.default,
        _aten.clone.default,
        _aten._to_copy.default,
        _aten.cat.default,
    }
)


# What the tensor a scatter writes into may be built from (``_movable``).
_VIEWS_AND_SCATTERS = VIEW_OPS | INPLACEABLE


def _movable(node: fx.Node) -> bool:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace not in ("aten", "prims") or target._schema.is_mutable:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    if not any(isinstance(a.meta.get("val"), torch.Tensor) for a in node.all_input_nodes):
        return True  # a factory
    if target in INPLACEABLE:  # Note [A scatter into the frontier after the call]
        root = view_root(node.args[0], _VIEWS_AND_SCATTERS)
        return (  # into a value an ATen op computes: no input, no call's value
            root.op == "call_function"
            and isinstance(root.target, torch._ops.OpOverload)
            and not root.target._schema.is_mutable
        )
    return target in _MOVABLE or target in VIEW_OPS or torch.Tag.pointwise in target.tags


def plan_hoist(
    call: fx.Node,
    later: Iterable[fx.Node],
    earlier: Iterable[fx.Node],
    outputs: list[fx.Node],
    is_lazy: Any,
    written_here: Any,
    pinnable: Any = None,
    all_moved_read: bool = False,
) -> Realization | None:
    """The cheaper way to read the old value before ``call`` (Note [Reads moved back before
    the call]): ``later`` readers moved back (with the inputs they need from after the call),
    alone or with the lazy users that then become computable before the call, and the frontier
    of those and of the ``earlier`` lazy readers; ``None`` when a reader cannot move.

    ``written_here(node)``: whether ``node`` now denotes memory this call writes in place (a
    buffer of the call decided before): after the call it names the new value, so a reader of
    it must stay after the call. ``all_moved_read``: every node moved counts as a reader (the
    frontier runs from each), where ``later`` need not hold every reader after the call."""
    moved: dict[fx.Node, None] = {}

    def movable(n: fx.Node) -> bool:
        return _movable(n) and not any(written_here(a) for a in n.all_input_nodes)

    def need(n: fx.Node) -> bool:
        if n in moved or n < call:
            return True
        if n is call or not movable(n):
            return False
        if not all(need(a) for a in n.all_input_nodes):
            return False
        moved[n] = None
        return True

    later = list(later)
    if not all(need(r) for r in later):
        return None
    minimal = tuple(sorted(moved))
    grown = dict(moved)
    todo = list(minimal)
    while todo:  # lazy users computable before the call once the readers are
        n = todo.pop()
        for u in n.users:
            if u in grown or u.op == "output" or not movable(u) or not is_lazy(u):
                continue
            if all(a < call or a in grown for a in u.all_input_nodes):
                grown[u] = None
                todo.append(u)
    # a reader Inductor computes where it stands (a realized reduction) reads the old value
    # there, before the call: its users read its buffer, so no frontier runs from it
    readers = [*earlier, *(r for r in later if is_lazy(r))]
    plans = [
        plan_realization(
            call,
            [*readers, *(n for n in m if is_lazy(n))] if all_moved_read else readers,
            outputs,
            is_lazy,
            m,
            written_here,
            pinnable,
        )
        for m in (minimal, tuple(sorted(grown)))
    ]
    plans = [p for p in plans if p is not None]
    return min(plans, key=lambda p: p.nbytes, default=None)


def plan_users_hoisted(
    call: fx.Node,
    plain: Realization,
    readers: list[fx.Node],
    outputs: list[fx.Node],
    is_lazy: Any,
    written_here: Any,
    pinnable: Any = None,
) -> Realization | None:
    """A cheaper plan than ``plain`` for the lazy ``readers`` of a buffer before ``call``:
    the users after the call of ``plain``'s frontier moved back before it (``None`` when
    there are none, one cannot move, or it costs no less).

    Note [Users of the frontier moved back before the call]
    ``r = b * 1.5; op(b, r); m = r.amax() + r.mean()`` with the reductions after the call
    (``reorder_for_locality`` put them there): the frontier of ``b``'s lazy reader is ``r``
    itself, as large as ``b``, so the plain plan saves nothing over the clone. The users of
    the frontier after the call read only values that exist before it, so they may move back
    as the readers of Note [Reads moved back before the call] do, and the frontier becomes
    what they compute (``m``: 8 bytes; fuzz seed 20261706 #28 kept a 400 B clone of ``b``,
    PyTorch's built-in none). Every node moved counts as a reader, since a moved input may
    read the buffer itself."""
    early = set(plain.moved)
    later = sorted(
        {
            u
            for f in plain.nodes
            for u in f.users
            if u is not call and u.op != "output" and u > call and u not in early
        }
    )
    if not later:
        return None
    earlier = [*readers, *plain.moved]
    plan = plan_hoist(
        call, later, earlier, outputs, is_lazy, written_here, pinnable, all_moved_read=True
    )
    if plan is None or plan.nbytes >= plain.nbytes:
        return None
    return plan._replace(moved=tuple(sorted({*plain.moved, *plan.moved})))


def realize_before(
    ctx: Any, call: fx.Node, plan: Realization, chain: Any = lambda n: [n]
) -> None:
    """Move the plan's readers to just before ``call`` (in their order), then compute each of
    its frontier nodes there and make their later users read that. ``chain(f)``: ``f``, the
    node it views (or the input of a reshape that views it), ... down to the root a pin of
    ``f`` goes on."""
    for n in plan.moved:
        call.prepend(n)
    graph, analysis = ctx.gm.graph, ctx.analysis
    pins: dict[fx.Node, fx.Node] = {}
    for f in plan.in_place:  # Note [A frontier cut at its inputs]
        users = list(f.users)
        with graph.inserting_after(f):
            empty = emit(ctx, _aten.empty_like.default, (f,))
        with graph.inserting_after(empty):
            copied = emit(ctx, _aten.copy_.default, (empty, f))
        analysis.add_value(copied, analysis.position[f], users)
        for u in users:
            u.replace_input_with(f, copied)
    for f in plan.nodes:
        if f in plan.in_place:
            continue
        later = [u for u in f.users if u is not call and (u.op == "output" or u > call)]
        if f in plan.pinned:  # Notes [A realized value a later call writes], [A value the
            # call takes, pinned for its later readers] (frontier.py)
            *views, root = chain(f)
            with graph.inserting_before(call):
                if root not in pins:  # (one pin of a root for all its nodes)
                    pins[root] = pin_layout(ctx, root)
                    analysis.track(pins[root], root)  # a view of root: the reads stand
                pinned = pins[root]
                for v in reversed(views):  # the views again, on the pin
                    pinned = emit(ctx, v.target, (pinned, *v.args[1:]), v.kwargs)
                    if v in analysis.version:  # (a split's tuple has none: its items do)
                        analysis.track(pinned, v)
            for n in (root, *views):
                analysis.computed_by(
                    n, analysis.position[call], moved=n in plan.moved, pinned=True
                )
            for u in later:
                u.replace_input_with(f, pinned)
            continue
        with graph.inserting_before(call):
            empty = emit(ctx, _aten.empty_like.default, (f,))
            copied = emit(ctx, _aten.copy_.default, (empty, f))
        # a buffer of its own for the analysis: every use of f after the call now reads it
        # (Inductor computes f into it, or copies a view into it)
        analysis.add_value(copied, analysis.position[call], later)
        for u in later:
            u.replace_input_with(f, copied)

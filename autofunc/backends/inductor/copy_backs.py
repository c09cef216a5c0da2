"""Copies back into graph inputs moved to where their value is computed: a repair of Inductor's
policy run before the facts (``InductorPolicy.repairs_before``, Note [Pipeline] step 1 in
``reinplace.py``).

``copy_backs_where_computed(graph)`` moves AOTAutograd's epilogue ``copy_(x, v)`` of a graph
input ``x`` to just after ``v`` where nothing after ``v`` but that copy reads ``x``'s memory,
directly or through a value Inductor may compute late from it. Reads the graph's order and node
kinds; no Inductor configuration.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

from ...hops.adapter import mutation_targets, read_node
from ...passes.memory_ops import VIEW_OPS, storage_address
from ...passes.walks import input_copies, users_through_views
from .evaluation import computed_where_taken, lazy_under_inductor
from .repairs import INPLACEABLE

__all__ = [
    "copy_backs_where_computed",
    "in_memory_of",
    "read_after",
    "shares_memory_with_another",
]

_aten = torch.ops.aten

# Views Inductor may lower as views of their input (a reshape may be one).
_VIEWS = VIEW_OPS | {_aten.reshape.default}
# What may return its first input's memory (``in_memory_of``).
_ALIASING = _VIEWS | INPLACEABLE | {operator.getitem}


def copy_backs_where_computed(graph: fx.Graph) -> None:
    """Move the epilogue ``copy_(x, v)`` of a graph input ``x`` to just after ``v`` where
    nothing after ``v`` but that copy reads ``x``'s memory.

    Note [Copies back where their value is computed]
    ``r = v.sum() * 1.5; op(r); b[4:5].add_(r); op(r)`` reaches the pass as ``a = b[4:5] + r;
    s = slice_scatter(b, a); op(r); copy_(b, s)``: ``a`` reads ``r`` before the second call,
    and its only path to a use after the call runs through ``s`` and the copy at the end, so
    for the pass ``a`` is a lazy read of ``r`` pending across the call, and the call kept a
    clone of ``r`` (fuzz seed 20261917 #20: 8 B over PyTorch's built-in). Inductor's own
    re-inplacing (after this pass) writes such a scatter into ``b`` where it stands, ``a``
    computed there, before the call. The same holds for a new value that is no scatter
    (``t = b.t(); t.add_(r[0]); o = op(r)``: ``copy_(b, t')`` at the end, 20261919 #108, 16 B
    over): once nothing after ``v`` reads ``x``'s memory, the input is the graph's to write
    there. The copy moved to just after ``v`` tells the pass that ``v`` is computed there, and
    makes it so whatever Inductor's re-inplacing decides: Inductor lowers a copy into an input
    where it stands (Note [Copies moved before the writes]), into the input's buffer.

    Sound where no node after ``v`` but the copy uses a value that may be ``x``'s memory once
    the calls write in place (``in_memory_of``: ``x``, a view of it, a call's new value of
    it; ``op(b); t = b.view(2, 2).clone(); op(b); return t`` reads the first call's value of
    ``b`` after the second call's value is made), except ``v`` itself and its views, which
    hold the value the copy writes: nodes may read them (``v1 = b[4:5]; v1.add_(r); op(r, v1)``
    reads the scatter's view), but nothing that writes memory may take one after ``v`` (a
    later call writing ``v`` in place would write ``x`` once Inductor re-inplaces the scatter;
    at the end, the copy's read of ``v`` keeps that call off it). No other input shares
    ``x``'s memory.
    It pays only where no such read is pending either: a value Inductor computes late from
    ``x``'s old memory and that a node after ``v`` reads, other than through ``v`` (``b.mul_(2);
    t = b + 0.25; op([a, b], t); return t * b``: ``t`` read after the call), must be computed
    into a buffer of its own before Inductor's copy writes ``x`` (fuzz seed 20261906 #248:
    960 B more), where at the end it is computed from ``x`` inside its reader's kernel. Nor may
    a node after ``v`` read ``v``, other than the output (through views), unless ``v`` is in
    ``x``'s memory (a scatter into it, which Inductor writes into ``x`` itself): Inductor
    computes such a ``v`` into a buffer of its own for those readers and copies that into ``x``
    (fuzz seed 20261921 #1: ``b.mul_(0.5); t = b.permute(2, 0, 1) * 1; r = b.cumsum(2)``, 480 B
    more), where at the end it computes ``v`` into ``x`` alone.
    """
    inputs = graph.find_nodes(op="placeholder")
    for dst, copies in input_copies(graph).items():
        copy, src = copies[-1], copies[-1].args[1]
        if (
            len(copies) != 1
            or not isinstance(src, fx.Node)
            or src.op != "call_function"
            or copy is src.next
            or shares_memory_with_another(dst, inputs)
        ):
            continue
        memory = in_memory_of(dst)
        new = {src, *(v for v in users_through_views(src) if v.target in _VIEWS)}
        if any(n > src for n in memory - new - {copy}) or read_after(memory - new, src, copy):
            continue
        if src not in memory and any(
            u > src and u is not copy and u not in new and u.op != "output"
            for n in new
            for u in n.users
        ):
            continue  # the value would be stored twice (the Note)
        src.append(copy)


def in_memory_of(x: fx.Node) -> set[fx.Node]:
    """The nodes whose value may be ``x``'s memory once the pass and Inductor's re-inplacing
    have run: ``x``, the views and reshapes of one, the scatters into one, and what a call
    taking one returns (a functional mutation node that takes one as a buffer, any other
    higher-order op that takes one, a mutable op whose schema lets a result alias its argument,
    and the items of its result)."""
    mine, targets = {x}, mutation_targets()
    for n in x.graph.nodes:  # in graph order: a node after its inputs
        if n.op != "call_function" or not any(a in mine for a in n.all_input_nodes):
            continue
        target = n.target
        if target in targets:
            m = read_node(n)  # a call's read arguments are not what it returns
            returns = m is None or any(b in mine for b in m.buffers)
        else:
            returns = (
                (target in _ALIASING and n.args[0] in mine)
                or isinstance(target, torch._ops.HigherOrderOperator)
                or (isinstance(target, torch._ops.OpOverload) and _returns_an_alias(target))
            )
        if returns:
            mine.add(n)
    return mine


def _returns_an_alias(target: torch._ops.OpOverload) -> bool:
    """Whether ``target`` is a mutable op a result of which its schema lets alias an argument
    (``add_``'s ``Tensor(a!)``); a custom op's results are memory of their own (PyTorch checks
    that a custom op returns no input or view of one: fuzz seed 20261931 #291, ``mlret(a, a)``
    written in place, its fresh result read after the input's new value is made)."""
    schema = target._schema
    return schema.is_mutable and any(r.alias_info is not None for r in schema.returns)


def read_after(
    old: set[fx.Node], src: fx.Node, copy: fx.Node, returned: set[fx.Node] | None = None
) -> bool:
    """Whether a node after ``src`` other than ``copy`` reads the values ``old``: a user of one,
    or a user of a value Inductor may compute late from one (``lazy_under_inductor``), followed
    through such values but not through ``src``, whose later readers read the value the copy
    writes. With ``returned`` (the outputs whose memory the caller gets: ``Pass.outputs``), the
    output reads only those."""

    def reads(user: fx.Node, value: fx.Node) -> bool:
        return user is not copy and (
            returned is None or user.op != "output" or value in returned
        )

    todo = [u for n in old for u in n.users if reads(u, n)]
    seen = set(todo)
    while todo:
        u = todo.pop()
        if u > src:
            return True
        if u is src or not lazy_under_inductor(u) or _taken_before(u, src):
            continue  # computed where it stands, or where taken, before the copy
        for w in u.users:
            if reads(w, u) and w not in seen:
                seen.add(w)
                todo.append(w)
    return False


def _taken_before(node: fx.Node, src: fx.Node) -> bool:
    """Whether an ``as_strided`` before ``src`` makes Inductor compute the lazy ``node`` into a
    buffer of its own, which later users read (Note [Values computed where they are taken]:
    fuzz seed 20261932 #144, a value pinned for a call and returned through views)."""
    return any(u < src and computed_where_taken(u, node) for u in node.users)


def shares_memory_with_another(node: fx.Node, inputs: list[fx.Node]) -> bool:
    """Whether another graph input has ``node``'s fake storage (or ``node`` has none)."""
    mine = node.meta.get("val")
    if not isinstance(mine, torch.Tensor):
        return True
    key = storage_address(mine)
    return any(
        isinstance(v := other.meta.get("val"), torch.Tensor) and storage_address(v) == key
        for other in inputs
        if other is not node
    )

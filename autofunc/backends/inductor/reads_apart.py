"""Values a write into a graph input reads from that input elsewhere than where it writes them,
computed into a buffer of their own first: a repair of Inductor's policy run after the rewrite
(``InductorPolicy.repairs_after``, Note [Pipeline] step 5 in ``reinplace.py``).

``realize_reads_apart(ctx)`` finds each ``copy_`` into a graph input (or a view of one) that a
kernel of its own wrote before, and computes first what the copied value reads of that input
apart from the elements it writes. Reads the graph's order, node kinds and fake values.

Note [A write that reads its own memory elsewhere]
Inductor lowers ``copy_(x, v)`` into a graph input ``x`` (the epilogue's copy-back, or a
scatter it re-inplaces into ``x``) to one loop that computes ``v``'s element ``i`` inline from
its inputs and stores it into ``x``'s element ``i``. Where ``v`` reads ``x`` at other elements
than the one it stores (one element broadcast, a flip, a reduction Inductor inlines), an
element stored early is read late, new where eager reads it old. Inductor keeps such a value in
a buffer of its own while it sees the loop read ``x``; but after an extern kernel that writes
``x`` (a custom op written in place, ``index_put_``) its readers read ``x`` under another name,
and the loop no longer sees that it reads what it writes. Fuzz seed 20261937 #164: ``v0 =
b[1, :, 0]; m3way(v0[-3], b, b); v0.add_(v0[-3].sum() * -2)`` on an input ``b`` stored
``b[1, 0, 0]`` first and added its new value to the next two elements. PyTorch's built-in
computes the same wrong values wherever its own handling writes ``b`` in place (``w(b);
b[1, :, 0].add_(b[1, 0, 0] * 2)``, ``w(b); b.copy_(b.flip(0) + 1)``), and plain PyTorch does
after ``b.index_put_(...)``.

So for each such ``copy_`` the repair follows the copied value down to where its elements come
from: through pointwise nodes of the written shape, scatters (the first input lands where the
scatter does, the source where the scatter's view does), reshapes and views that only regroup
elements (``squeeze``, ``unsqueeze``), views of a value that land where the value does
(``kv[1].mul_(2)`` twice), and indexed writes (``index_put``, ``scatter``: the first input lands
where they do), down to views of ``x``, *aligned* where a view is the written element's own
place. What is read otherwise (broadcast, reduced, reindexed, a view of
``x`` at another place, an indexed write's values) and reads, inline, memory of ``x`` that the
write changes is computed into a buffer of its own first, ``fresh_alias(clone(a))`` right after
``a`` (just before its reader, for a view of ``x``, whose elements are read there): Inductor
computes the clone into a buffer an extern kernel takes (Note [A fresh alias Inductor keeps] in
``ops.py``), which no later kernel fuses away, and the readers read the alias. (A plain copy
into a buffer of its own, ``copy_(empty_like(a), a)``, was fused into the write and read there
again.) Memory the write leaves as it was (outside a scatter's view) may be read anywhere; a
realized value (a reduction Inductor computes apart, a pin, a copy, a value an extern kernel
took before the write, such as a buffer a call writes) is read from its own buffer. The copy
costs the value's bytes, only where the loop would read a value it wrote; the built-in keeps a
copy of the whole input there, or is wrong.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef

from ...passes.emit import emit, fake_values
from ...passes.memory_ops import SCATTER_VIEWS, VIEW_OPS
from ...passes.walks import copy_calls, view_root, view_walk, written_arguments
from ...regions import Region, overlaps, region_of, same_geometry
from ...symbolic import known
from .evaluation import lazy_under_inductor
from .ops import DTYPE_VIEW, FRESH_ALIAS, extern_kernel
from .repairs import INPLACEABLE

__all__ = ["realize_reads_apart"]

_aten = torch.ops.aten

# Views, and the opaque aliases Inductor's policy emits (``ops.py``): memory of their input.
_ALIASES = VIEW_OPS | {FRESH_ALIAS, DTYPE_VIEW}
# The ops that tuple views come from (``getitem`` of another node's tuple is a result).
_TUPLE_VIEWS = frozenset({_aten.split.Tensor, _aten.split_with_sizes.default, _aten.unbind.int})
# Reshapes, views where the sizes allow (Inductor lowers them so).
_RESHAPES = frozenset({_aten.reshape.default, _aten.view.default, _aten._unsafe_view.default})
# Views that keep their input's elements in order, only regrouped (``_unshaped`` inverts them).
_REGROUPING = _RESHAPES | {
    _aten.squeeze.dim,
    _aten.squeeze.dims,
    _aten.unsqueeze.default,
    _aten.unflatten.int,
    _aten.alias.default,
    _aten.detach.default,
}
# Scatters whose view addresses their first input's memory the way the result addresses its own.
_SCATTERS = {t: v for t, v in SCATTER_VIEWS.items() if t != _aten.as_strided_scatter.default}
# Ops whose result is their first input with some elements replaced where their other inputs
# say (Inductor writes them into that input in place).
_INDEXED_WRITES = frozenset(
    {
        _aten.index_put.default,
        _aten._unsafe_index_put.default,
        _aten.index_copy.default,
        _aten.index_add.default,
        _aten.index_fill.int_Scalar,
        _aten.scatter.src,
        _aten.scatter.value,
        _aten.scatter_add.default,
        _aten.scatter_reduce.two,
    }
)
# Ops that read a tensor argument's size and dtype, none of its elements.
_SHAPE_ONLY = frozenset(
    {
        _aten.empty_like.default,
        _aten.zeros_like.default,
        _aten.ones_like.default,
        _aten.full_like.default,
        _aten.new_empty.default,
        _aten.new_zeros.default,
        _aten.new_ones.default,
        _aten.new_full.default,
        _aten.new_empty_strided.default,
        _aten.fill.Scalar,
        _aten.sym_size.int,
        _aten.sym_stride.int,
        _aten.sym_numel.default,
        _aten.sym_storage_offset.default,
    }
)


def realize_reads_apart(ctx: Any) -> None:
    """For each ``copy_`` into a graph input an extern kernel wrote before, compute what its
    value reads of the input apart from the written elements into a buffer of its own first
    (Note [A write that reads its own memory elsewhere])."""
    graph = ctx.gm.graph
    written = _written_inputs(graph)
    if not written:
        return
    walk = _Walk(ctx, _extern_uses(graph))
    for copy in copy_calls(graph):
        dst, src = copy.args[0], copy.args[1]
        if not isinstance(src, fx.Node):
            continue
        place = walk.replay(dst)
        if place is None or not isinstance(place[1], torch.Tensor):
            continue
        if not any(n < copy for n in written.get(place[0], ())):
            continue
        for arg, reader in walk.reads_apart(src, place, copy):
            walk.realize(arg, reader)


def _written_inputs(graph: fx.Graph) -> dict[fx.Node, list[fx.Node]]:
    """Each graph input -> the extern kernels writing its memory (ops with a written argument,
    ``copy_`` aside: Inductor lowers that one itself)."""
    out: dict[fx.Node, list[fx.Node]] = {}
    for node in graph.nodes:
        if node.target is _aten.copy_.default:
            continue
        for v in written_arguments(node):
            root = view_root(v, _ALIASES)
            if isinstance(root, fx.Node) and root.op == "placeholder":
                out.setdefault(root, []).append(node)
    return out


def _extern_uses(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """The root of each tensor an extern kernel (``ops.extern_kernel``) takes -> the first such
    kernel: Inductor computes it into a buffer of its own there at the latest."""
    out: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        if extern_kernel(node):
            for a in node.all_input_nodes:
                out.setdefault(view_root(a, _ALIASES), node)
    return out


def _run_view(target: Any, val: Any, args: Any, kwargs: Any) -> Any:
    """``target`` (a view op) run on the fake value ``val`` with the other arguments
    ``args``/``kwargs`` (nodes among them read as their fake values); ``None`` where the fake
    value does not take it."""
    try:
        rest = fake_values((tuple(args), dict(kwargs)))
        return target(val, *rest[0], **rest[1])
    except Exception:  # noqa: BLE001 - a view the fake value does not take: unknown
        return None


def _same_storage(a: Any, b: Any) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())
    )


def _tensor_args(node: fx.Node) -> list[fx.Node]:
    """The tensor-valued nodes ``node`` takes (in lists too)."""
    return [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]


def _same_shape(val: Any, like: torch.Tensor) -> bool:
    return (
        isinstance(val, torch.Tensor)
        and val.dim() == like.dim()
        and all(known(a == b) for a, b in zip(val.shape, like.shape))
    )


def _elementwise(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.pointwise in target.tags or target is _aten._to_copy.default
    )


class _Walk:
    """The walks of one graph: views replayed over their input's fake value, and the values
    computed into buffers of their own so far."""

    def __init__(self, ctx: Any, extern_uses: dict[fx.Node, fx.Node]) -> None:
        self.ctx = ctx
        self._extern_uses = extern_uses
        self.writer: fx.Node | None = None  # the copy_ ``reads_apart`` walks
        self._replayed: dict[fx.Node, tuple[fx.Node, Any] | None] = {}
        self._copies: dict[fx.Node, fx.Node] = {}

    def _realized(self, node: fx.Node) -> bool:
        """Whether Inductor reads ``node`` from a buffer of its own, computed before the copy:
        a graph input or constant, a copy, a pin, a reduction Inductor computes apart
        (``evaluation.lazy_under_inductor``), a value an extern kernel took before the copy
        (a buffer a call writes among them), but for a scatter Inductor re-inplaces into an
        input, whose kernel is the one writing the input."""
        if node.op != "call_function" or node.meta.get("autofunc.pin"):
            return True
        if not lazy_under_inductor(node):
            return True
        root = view_root(node, _ALIASES)
        first = self._extern_uses.get(root)
        if first is None or self.writer is None or not first < self.writer:
            return False
        return view_root(root, _ALIASES | INPLACEABLE).op != "placeholder"

    def replay(self, node: Any) -> tuple[fx.Node, torch.Tensor] | None:
        """``(x, t)`` where ``node`` is a chain of views of the graph input ``x``: ``t`` the
        chain run on ``x``'s fake value (a node's own fake value may be of the memory it was a
        view of before the rewrite); ``None`` otherwise, or where a view does not replay."""
        if not isinstance(node, fx.Node):
            return None
        if node not in self._replayed:
            self._replayed[node] = self._replay(node)
        return self._replayed[node]

    def _replay(self, node: fx.Node) -> tuple[fx.Node, Any] | None:
        if node.op == "placeholder":
            val = node.meta.get("val")
            return (node, val) if isinstance(val, torch.Tensor) else None
        if node.op != "call_function" or node.meta.get("autofunc.pin"):
            return None
        if node.target not in _ALIASES and node.target not in _RESHAPES:
            return None
        if node.target is operator.getitem and node.args[0].target not in _TUPLE_VIEWS:
            return None
        base = self.replay(node.args[0])
        if base is None:
            return None
        val = _run_view(node.target, base[1], node.args[1:], node.kwargs)
        if node.target in _RESHAPES and not _same_storage(val, base[1]):
            return None  # (a reshape that copies)
        return (base[0], val) if isinstance(val, (torch.Tensor, tuple, list)) else None

    def reads_apart(
        self, value: fx.Node, place: tuple[fx.Node, torch.Tensor], writer: fx.Node
    ) -> list[tuple[fx.Node, fx.Node]]:
        """The ``(argument, reader)`` pairs of ``value``'s computation, written at ``place``,
        that read the written memory of ``place``'s input apart from where they land."""
        x, _ = place
        self.writer = writer
        changed: list[Region] = []
        apart: list[tuple[fx.Node, fx.Node]] = []
        todo, seen = [(value, place[1], writer)], set()
        # computed node -> where it lands (a scatter's first input, known before its source
        # is walked: ``kv[1].mul_(2)`` twice reads the first scatter through its view)
        placed: dict[fx.Node, list[torch.Tensor]] = {value: [place[1]]}

        def push(n: fx.Node, where: torch.Tensor, by: fx.Node) -> None:
            todo.append((n, where, by))
            placed.setdefault(n, []).append(where)
        while todo:
            node, at, reader = todo.pop()
            if (node, id(at)) in seen:
                continue
            seen.add((node, id(at)))
            here = region_of(at, x.meta["val"])
            view = self.replay(node)
            if view is not None and view[0] is x:
                if not (isinstance(view[1], torch.Tensor) and same_geometry(view[1], at)):
                    changed.append(here)
                    apart.append((node, reader))
                continue
            if self._views_in_place(node, at, placed):  # (its root's walk reads for it)
                continue
            val = node.meta.get("val")
            if node.target in _SCATTERS and _same_shape(val, at) and not self._realized(node):
                # (what it changes is what its two inputs change where they land; the first
                # input walked first, so that its place is known to views of it the source reads)
                lands = self._lands(node, at)
                if lands is None:
                    changed.append(here)
                    apart.append((node.args[1], node))
                else:
                    push(node.args[1], lands, node)
                push(node.args[0], at, node)
                continue
            changed.append(here)
            if self._realized(node):
                continue
            if _elementwise(node) and _same_shape(val, at):
                for a in _tensor_args(node):
                    if _same_shape(a.meta.get("val"), at):
                        push(a, at, node)
                    else:
                        apart.append((a, node))
            elif node.target in _INDEXED_WRITES and _same_shape(val, at):
                # the first input lands where the op does; what replaces its elements lands
                # where the indices say, anywhere in ``at``
                base = node.args[0]
                push(base, at, node)
                apart.extend((a, node) for a in _tensor_args(node) if a is not base)
            elif node.target in _REGROUPING and (inner := self._unshaped(node, at)) is not None:
                push(node.args[0], inner, node)
            elif node.target is _aten.copy.default and _same_shape(val, at):
                src = node.args[1]
                if isinstance(src, fx.Node) and _same_shape(src.meta.get("val"), at):
                    push(src, at, node)
                elif isinstance(src, fx.Node):
                    apart.append((src, node))
            else:
                apart.append((node, reader))
        return [(a, r) for a, r in apart if self._reads(a, x, changed)]

    def _views_in_place(
        self, node: fx.Node, at: torch.Tensor, placed: dict[fx.Node, list[torch.Tensor]]
    ) -> bool:
        """Whether ``node`` is a chain of views (reshapes that view among them) of a computed
        node that lands where the chain, run on that node's place, lands: ``at``."""
        chain = list(view_walk(node, _ALIASES | _RESHAPES))
        root = chain.pop()
        if not chain or root not in placed:
            return False
        for where in placed[root]:
            val: Any = where
            for v in reversed(chain):
                val = _run_view(v.target, val, v.args[1:], v.kwargs)
                if val is None:
                    break
            if _same_storage(val, at) and same_geometry(val, at):
                return True
        return False

    def _unshaped(self, node: fx.Node, at: torch.Tensor) -> torch.Tensor | None:
        """Where the input of the regrouping view ``node`` lands when ``node`` lands at ``at``
        (``None`` where ``at`` takes no view of the input's shape)."""
        src = node.args[0]
        val = src.meta.get("val") if isinstance(src, fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        try:
            out = at.view(val.shape)
        except Exception:  # noqa: BLE001 - no view of that shape there
            return None
        return out if _same_storage(out, at) else None

    def _lands(self, scatter: fx.Node, at: torch.Tensor) -> torch.Tensor | None:
        """Where ``scatter``'s source lands when the scatter lands at ``at``."""
        val = _run_view(_SCATTERS[scatter.target], at, scatter.args[2:], scatter.kwargs)
        return val if isinstance(val, torch.Tensor) else None

    def _reads(self, node: fx.Node, x: fx.Node, changed: list[Region]) -> bool:
        """Whether ``node``, computed inline, reads memory of ``x`` in ``changed``."""
        todo, seen = [node], {node}
        while todo:
            n = todo.pop()
            view = self.replay(n)
            if view is not None and view[0] is x:
                t = view[1]
                here = region_of(t, x.meta["val"]) if isinstance(t, torch.Tensor) else None
                if here is None or any(overlaps(here, c) for c in changed):
                    return True
                continue
            if self._realized(n) or n.target in _SHAPE_ONLY:
                continue
            ins = n.all_input_nodes
            if n.target is _aten.copy.default:
                ins = [a for a in ins if a is not n.args[0]]
            for a in ins:
                if a not in seen:
                    seen.add(a)
                    todo.append(a)
        return False

    def realize(self, arg: fx.Node, reader: fx.Node) -> None:
        """Compute ``arg`` into a buffer of its own: right after it (its users read that), or,
        for a view of an input, just before ``reader`` (which reads that)."""
        if self.replay(arg) is None:
            if arg not in self._copies:
                users = list(arg.users)
                self._copies[arg] = copied = self._copy(arg, arg.next)
                for u in users:
                    u.replace_input_with(arg, copied)
        elif arg in reader.all_input_nodes:  # (not copied for it already)
            reader.replace_input_with(arg, self._copy(arg, reader))

    def _copy(self, arg: fx.Node, before: fx.Node) -> fx.Node:
        """``fresh_alias(clone(arg))`` just before ``before``: Inductor computes the clone into
        a buffer an extern kernel takes, which no kernel after it may fuse away (a plain copy
        into a buffer of its own is fused into the write, and read there again)."""
        with self.ctx.gm.graph.inserting_before(before):
            clone = emit(self.ctx, _aten.clone.default, (arg,))
            return emit(self.ctx, FRESH_ALIAS, (clone,))

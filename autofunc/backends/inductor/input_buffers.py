"""Graph inputs as the buffers the calls write: a repair of Inductor's policy run after the
rewrite (``InductorPolicy.repairs_after``, Note [Pipeline] step 5 in ``reinplace.py``).

``inputs_as_buffers(ctx)`` finds a buffer the rewritten graph computes, has calls write in
place and copies into a graph input at the end (AOTAutograd's epilogue ``copy_``), and makes the
input that buffer: the copy moves to where the buffer is made, every later use of the buffer
takes the input. Reads the graph's order, node kinds and fake values; records each kept clone
it replaces in ``Pass.into_inputs`` for the report.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import fx

from ...passes.copies import CopyKind, copy_tag, set_copy_tag
from ...passes.emit import emit
from ...passes.memory_ops import SCATTER_VIEWS, VIEW_OPS
from ...passes.walks import input_copies, view_root
from ...regions import contains, region_of, same_geometry
from ...symbolic import known
from .copy_backs import in_memory_of, read_after, shares_memory_with_another
from .ops import FRESH_ALIAS

__all__ = ["inputs_as_buffers", "scatters_into_inputs"]

_aten = torch.ops.aten

# What takes a tensor's memory as it is: views, and the pass's fresh alias of an argument.
_ALIASES = VIEW_OPS | {FRESH_ALIAS}
# Views that pick the same elements of a tensor whatever its strides: the ops a buffer's uses
# may take it through when the input taking its place is laid out otherwise.
_LAYOUT_FREE = frozenset(
    {
        FRESH_ALIAS,
        _aten.alias.default,
        _aten.diagonal.default,
        _aten.permute.default,
        _aten.select.int,
        _aten.slice.Tensor,
        _aten.squeeze.dim,
        _aten.squeeze.dims,
        _aten.t.default,
        _aten.transpose.int,
        _aten.unsqueeze.default,
    }
)


@dataclasses.dataclass(frozen=True)
class _Buffer:
    """A buffer copied into a graph input at the end, as the pass left it."""

    anchor: fx.Node  # where it is made: the copy into the input moves just after it
    value: fx.Node  # what the moved copy writes into the input
    aliases: frozenset[fx.Node]  # the nodes that are the buffer, in the input's geometry
    span_views: tuple[fx.Node, ...] = ()  # other views of the span copy's flat buffer


def inputs_as_buffers(ctx) -> None:
    """Where the rewritten graph computes a buffer ``v``, writes it in place and copies it into
    the graph input ``x`` at the end, copy it into ``x`` where it is made and write ``x``.

    Note [A buffer copied into an input is the input]
    ``v = a[2:3]; a.mul_(0.5); op(v)`` reaches Inductor, once the pass has written the call's
    buffer in place, as ``m = a * 0.5; op(m[2:3]); copy_(a, m)``: ``m`` is a buffer of its own,
    alive from its computation to the copy at the end (fuzz seed 20261917 #231: 24 B over
    PyTorch's built-in, which writes a copy of the slice and scatters it into ``a``). Eager
    writes ``a`` itself: its new value, then the call. So does this graph once the copy moves to
    just after ``m`` and every later use of ``m`` takes ``a`` instead: ``a`` then holds, at
    every point after ``m``, what ``m`` held (its value at the copy, each later write made to
    it), and at the end ``m``'s last value, which the copy wrote before. Inductor computes
    ``m`` into ``a`` in the copy's kernel, the copy being ``m``'s only use. The same holds for
    a clone the pass keeps in the input's layout (20261922 #157: ``v1 = a[:, 0:1].diagonal();
    v1.mul_(0.5); op(v1, a[:, 0:1], v1)`` on a strided ``a``, where the scatter of ``v1``'s new
    value into ``a`` was cloned into a span of ``a``'s layout, 48 B over): the input is the
    clone, the scatter is copied into it, and the span's other views are views of the input.

    Sound where, after ``v``, nothing but the copy uses a value that may be ``x``'s memory and
    no read of ``x``'s old memory is pending (``in_memory_of``, ``read_after``: ``x`` holds
    ``v``'s values from there on), no other input shares ``x``'s memory, ``v`` is memory of its
    own (an op with no aliasing result: not a view, an input or a call's value, whose writes
    another tensor would see; or the pass's clone), the caller gets the memory of neither ``v``
    nor a view of it (it would get ``x``'s; an output AOTAutograd regenerates from the input is
    the input's anyway), and ``x`` and ``v`` have one geometry, or the same sizes and dtype with
    every use of ``v`` taking it through views that pick the same elements whatever the strides
    (``_LAYOUT_FREE``; an ``as_strided`` or a shape ``view`` depends on them). The span's other
    views address ``x``'s storage as they addressed the span's: one geometry, ``x`` at offset
    0, each inside the clone's elements.
    It pays only where calls are all that use ``v`` (through views): a node reading ``v`` after
    the move reads ``x``, and Inductor computes ``v`` into ``x`` together with that reader,
    ahead of the nodes between them, and plans its buffers otherwise (fuzz seed 20261921 #1,
    ``b.mul_(0.5); r = b.cumsum(2); t = b.permute(2, 0, 1) * 1``, no call writing ``b``'s new
    value: 480 B more). Never more memory otherwise: ``v``'s buffer, where it is still made, is
    freed at the copy, not at the end.
    """
    graph = ctx.gm.graph
    inputs, returned = graph.find_nodes(op="placeholder"), set(ctx.outputs)
    for dst, copies in input_copies(graph).items():
        buf = _buffer_made(copies[0].args[1]) if len(copies) == 1 else None
        copy = copies[0]
        if (
            buf is None
            or copy is buf.anchor.next
            or not _only_calls_use(buf, copy)
            or any(
                u > copy and u.op != "output" and not _regenerated(u, returned)
                for a in buf.aliases
                for u in a.users
            )
            or shares_memory_with_another(dst, inputs)
            or not all(_takes_the_place(dst, a, returned) for a in buf.aliases)
            or not _span_views_fit(dst, buf, returned)
        ):
            continue
        memory = in_memory_of(dst)
        late = {n for n in memory - {copy} if n > buf.anchor and not _regenerated(n, returned)}
        if late or read_after(memory, buf.anchor, copy, returned):
            continue
        cloned = _cloned(copy.args[1])
        if cloned is not None:
            ctx.into_inputs.append((*cloned, dst.name))
        _rewrite(buf, copy, dst)


def _rewrite(buf: _Buffer, copy: fx.Node, dst: fx.Node) -> None:
    buf.anchor.append(copy)
    copy.update_arg(1, buf.value)
    for alias in buf.aliases:
        for user in list(alias.users):
            if user is not copy and user not in buf.aliases:
                user.replace_input_with(alias, dst)
    for view in buf.span_views:
        view.replace_input_with(view.args[0], dst)
    for alias in sorted(buf.aliases, reverse=True):
        _erase_unused(alias)


def _buffer_made(src: object) -> _Buffer | None:
    """The buffer an input's copy-back copies: a node with memory of its own and its pins
    (``pin_layout``), or the pass's span copy (``CloneKind.SPAN``: the value is the copied
    node, the aliases its view in the input's geometry); ``None`` for anything else."""
    if not isinstance(src, fx.Node):
        return None
    flat = src.args[0] if src.target == _aten.as_strided.default else None
    if (
        src.meta.get("autofunc.clone")
        and isinstance(flat, fx.Node)
        and flat.target == _aten.as_strided_scatter.default
    ):
        others = tuple(u for u in flat.users if u is not src)
        return _Buffer(src, flat.args[1], frozenset({src}), others)
    own = flat if src.meta.get("autofunc.pin") else src
    if not _own_memory(own):
        return None
    pins = (u for u in own.users if u.meta.get("autofunc.pin"))
    return _Buffer(own, own, frozenset({own, *pins}))


def _own_memory(node: object) -> bool:
    """Whether ``node`` is a tensor an ATen op makes in memory of its own: no result of it
    aliases an argument and it writes none; not an allocation whose values are not set (a
    copy of it would copy nothing)."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if target in (_aten.empty_strided.default, _aten.empty.memory_format):
        return False
    return not schema.is_mutable and not any(r.alias_info for r in schema.returns)


def _uses(node: fx.Node) -> list[fx.Node]:
    """The nodes that use ``node`` or an alias of it (``_ALIASES``), the aliases included."""
    out, todo, seen = [], [node], {node}
    while todo:
        for user in todo.pop().users:
            if user not in seen:
                seen.add(user)
                out.append(user)
                if user.op == "call_function" and user.target in _ALIASES:
                    todo.append(user)
    return out


def _only_calls_use(buf: _Buffer, copy: fx.Node) -> bool:
    """Whether the buffer's uses, through aliases, are the copy and calls of mutable ops, one
    at least (the Note: a node reading it otherwise may cost memory)."""
    ends = [
        u
        for a in (*buf.aliases, *buf.span_views)
        for u in _uses(a)
        if u is not copy
        and u not in buf.aliases
        and u.target not in _ALIASES
        and u.op != "output"  # what the caller gets: ``_takes_the_place``
    ]
    return bool(ends) and all(
        isinstance(u.target, torch._ops.OpOverload) and u.target._schema.is_mutable for u in ends
    )


def _takes_the_place(dst: fx.Node, src: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether the input ``dst`` can stand for ``src`` in every use of ``src``: one geometry,
    or the same sizes and dtype with ``src`` taken only through ``_LAYOUT_FREE`` views (and
    pins); and the caller gets the memory of neither ``src`` nor a view of it (``returned``:
    ``Pass.outputs``)."""
    mine, theirs = dst.meta.get("val"), src.meta.get("val")
    if not isinstance(mine, torch.Tensor) or not isinstance(theirs, torch.Tensor):
        return False
    uses = _uses(src)
    if src in returned or any(u in returned for u in uses) or mine.dtype != theirs.dtype:
        return False
    if same_geometry(mine, theirs):
        return True
    if mine.dim() != theirs.dim() or not all(
        known(a == b) for a, b in zip(mine.shape, theirs.shape)
    ):
        return False
    # the pins of a buffer are dropped (the input is laid out already: ``pin_layout``)
    views = (u for u in uses if u.target in _ALIASES and not u.meta.get("autofunc.pin"))
    return all(u.target in _LAYOUT_FREE for u in views)


def _span_views_fit(dst: fx.Node, buf: _Buffer, returned: set[fx.Node]) -> bool:
    """Whether each other view of the span copy addresses ``dst``'s storage as it addresses the
    span's: ``dst`` at offset 0 in the clone's geometry, the view an ``as_strided`` inside the
    clone's elements, its memory not the caller's."""
    if not buf.span_views:
        return True
    (clone,) = buf.aliases
    mine, theirs = dst.meta.get("val"), clone.meta.get("val")
    if not (
        isinstance(mine, torch.Tensor)
        and isinstance(theirs, torch.Tensor)
        and same_geometry(mine, theirs)
        and known(mine.storage_offset() == 0)
    ):
        return False
    flat = clone.args[0].meta.get("val")
    if not isinstance(flat, torch.Tensor):
        return False
    inside = region_of(theirs, flat)
    for view in buf.span_views:
        val = view.meta.get("val")
        if (
            view.target != _aten.as_strided.default
            or not isinstance(val, torch.Tensor)
            or not contains(inside, region_of(val, flat))
            or view in returned
            or any(u in returned for u in _uses(view))
        ):
            return False
    return True


def _regenerated(node: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether ``node`` is a view whose only uses, through views, are outputs the caller does
    not get the memory of (not ``returned``: AOTAutograd regenerates them from the input)."""
    if node.target not in VIEW_OPS or node in returned:
        return False
    return all(
        u.op == "output" or (u.target in VIEW_OPS and u not in returned)
        for u in _uses(node)
    )


def _cloned(src: fx.Node) -> tuple[str, str] | None:
    """``(call, buffer)`` where ``src`` is a clone the pass kept for a call's buffer
    (``emit_clone``: the clone, its pin, or its span copy's view), else ``None``."""
    if not (src.meta.get("autofunc.clone") or src.meta.get("autofunc.pin")):
        return None
    under = src.args[0] if src.target == _aten.as_strided.default else None
    for copied in (src, under):
        if not isinstance(copied, fx.Node):
            continue
        # the copy node carries the tag (``copy_tag``): the clone, or the span's scatter
        if copied.target == _aten.clone.default:
            source = copied.args[0]
        elif copied.target == _aten.as_strided_scatter.default:
            source = copied.args[1]
        else:
            continue
        tag = copy_tag(copied)
        if tag is not None and isinstance(source, fx.Node):
            return tag[1], view_root(source).name
    return None


def _erase_unused(node: fx.Node) -> None:
    """Erase ``node`` if nothing uses it, then each input of it left unused that the pass
    made for it (views, pins, the span copy's scatter and zeros: ops with no side effect)."""
    todo = [node]
    while todo:
        n = todo.pop()
        if n.users or n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target._schema.is_mutable:
            continue
        inputs = n.all_input_nodes
        n.graph.erase_node(n)
        todo.extend(inputs)


# Scatter -> the view it writes: those whose view addresses its input's memory the way the
# scatter's result addresses its own (``as_strided_scatter`` takes absolute offsets).
_SCATTERS = {t: v for t, v in SCATTER_VIEWS.items() if t != _aten.as_strided_scatter.default}


def scatters_into_inputs(ctx) -> None:
    """Where the graph copies into the input ``x``, at the end, a scatter into a view of ``x``
    read back into ``x``'s geometry, write the scattered value into that view of ``x`` where the
    scatter stands instead.

    Note [A scatter into an input written in place]
    ``a.unsqueeze(0).diagonal(1, 1, 3).mul_(0.5)`` after a call that writes ``a`` in place
    (fuzz seed 20261925 #69, on a strided ``a``) reaches Inductor as ``s = diagonal_scatter(
    a.unsqueeze(0), m, 1, 1, 3); copy_(a, s.squeeze(0))``. Inductor re-inplaces a scatter into
    a view of a graph input only where the scatter's recorded layout is the view's, and ``s``'s
    is dense where ``a`` is strided: it computes ``s`` into a buffer of its own and copies it
    into ``a`` (480 B over PyTorch's built-in, whose scatter reads the call's functional value,
    which Inductor re-inplaces). Eager writes ``m`` into ``a``'s diagonal, and so does
    ``copy_(a.unsqueeze(0).diagonal(1, 1, 3), m)`` where the scatter stood.

    Sound where the copy's source is the scatter read back through views that undo the views
    taking ``x`` to the scatter's input (``_undone``: the two chains, run on ``x``'s fake value,
    give ``x``'s geometry), nothing but the next of that chain uses one of its nodes (outputs
    AOTAutograd regenerates from ``x`` aside: they take the scatter's input, or ``x`` for the
    last view, which hold the same values once the scatter is written), and, after the
    scatter, nothing but the copy uses a value that may be ``x``'s memory and no read of
    ``x``'s old memory is pending: ``x`` then holds, outside the view, what the scatter read
    there, and inside it the scattered value, from the scatter's place to the end, as the copy
    would have left it. A scatter whose value is a scatter into the same view (``kv[1, 0]``
    written through ``kv[1]``) is one write of the innermost value. A scatter into ``x`` itself
    is left as it is: Inductor writes it into ``x`` where it stands.
    """
    graph = ctx.gm.graph
    inputs, returned = graph.find_nodes(op="placeholder"), set(ctx.outputs)
    for dst, copies in input_copies(graph).items():
        copy = copies[-1]
        chain = _read_back(copy, returned) if len(copies) == 1 else None
        if chain is None or shares_memory_with_another(dst, inputs):
            continue
        scatter, gone = chain[0], set(chain)
        # a scatter into the input itself Inductor re-inplaces as it stands (so does it a
        # scatter of a scatter into it: ``kv[1, 0].mul_(2)``)
        if scatter.args[0] is dst or not _undone(dst, scatter.args[0], chain[1:]):
            continue
        # views only outputs AOTAutograd regenerates take read nothing
        memory = {n for n in in_memory_of(dst) - gone - {copy} if not _regenerated(n, returned)}
        if any(n > scatter for n in memory) or read_after(memory, scatter, copy, returned):
            continue
        view, value, anchor = scatter.args[0], scatter, scatter
        while True:  # a scatter of a scatter into the same view: one write, the innermost's
            with graph.inserting_after(anchor):
                view = emit(ctx, _SCATTERS[value.target], (view, *value.args[2:]))
            anchor, value = view, value.args[1]
            if not _scatter_into(value, view):
                break
            gone.add(value)
        with graph.inserting_after(anchor):
            write = emit(ctx, _aten.copy_.default, (view, value))
        set_copy_tag(write, copy_tag(copy) or (CopyKind.OTHER, ""))  # the copy it replaces
        # outputs AOTAutograd regenerates from the input: views of what is written in place
        for n in {chain[0], chain[-1]}:
            n.replace_all_uses_with(_instead(chain, n, copy), lambda u: u not in gone | {copy})
        graph.erase_node(copy)
        _erase_unused(chain[-1])


def _read_back(copy: fx.Node, returned: set[fx.Node]) -> list[fx.Node] | None:
    """``[scatter, *views]``: the scatter the copy's source reads through a chain of views,
    each used by the next (the last by the copy) and otherwise, the scatter alone, only by
    outputs the caller does not get the memory of (``_regenerated``); or ``None``."""
    chain: list[fx.Node] = []
    node = copy.args[1]
    while isinstance(node, fx.Node) and node.target in _VIEW_ATEN:
        chain.append(node)
        node = node.args[0]
    if not isinstance(node, fx.Node) or node.target not in _SCATTERS:
        return None
    chain.append(node)
    chain.reverse()
    for n, user in zip(chain, (*chain[1:], copy)):
        others = [u for u in n.users if u is not user]
        instead = _instead(chain, n, copy)
        if others and (
            instead is None or not all(_regenerated_use(u, n, instead, returned) for u in others)
        ):
            return None
    return chain


def _instead(chain: list[fx.Node], node: fx.Node, copy: fx.Node) -> fx.Node | None:
    """What holds ``node``'s values once the scatter is written in place: the scatter's input
    for the scatter, the input for the chain's last view (the input's geometry, ``_undone``)."""
    if node is chain[-1]:
        return copy.args[0]
    return node.args[0] if node is chain[0] else None


def _regenerated_use(
    user: fx.Node, node: fx.Node, instead: fx.Node, returned: set[fx.Node]
) -> bool:
    """Whether ``user`` takes ``node`` only for outputs the caller does not get the memory of
    (the output, at positions not ``returned``, or a view ``_regenerated``), through views that
    may take ``instead`` in its place: any where the two have one geometry, else those that
    pick the same elements whatever the strides."""
    if user.op == "output":
        return node not in returned
    if not _regenerated(user, returned):
        return False
    base, val = instead.meta.get("val"), node.meta.get("val")
    if isinstance(base, torch.Tensor) and isinstance(val, torch.Tensor):
        if same_geometry(base, val):
            return True
    free = _LAYOUT_FREE | {_aten.unfold.default, _aten.expand.default}
    return all(u.op == "output" or u.target in free for u in (user, *_uses(user)))


_VIEW_ATEN = frozenset(t for t in VIEW_OPS if isinstance(t, torch._ops.OpOverload))


def _scatter_into(value: object, view: fx.Node) -> bool:
    """Whether ``value`` is a scatter, used only by the scatter it is scattered into, into a
    view that takes the same elements of the same node as ``view`` (and used by it alone)."""
    if not isinstance(value, fx.Node) or value.target not in _SCATTERS or len(value.users) != 1:
        return False
    base = value.args[0]
    return (
        isinstance(base, fx.Node)
        and len(base.users) == 1
        and base.target == view.target
        and base.args == view.args
        and base.kwargs == view.kwargs
    )


def _undone(dst: fx.Node, base: object, back: list[fx.Node]) -> bool:
    """Whether ``base`` is a chain of views of ``dst`` that the views ``back`` undo: run on
    ``dst``'s fake value, the two chains give ``dst``'s geometry (only constant arguments)."""
    forward: list[fx.Node] = []
    node = base
    while node is not dst:
        if not isinstance(node, fx.Node) or node.target not in _VIEW_ATEN:
            return False
        forward.append(node)
        node = node.args[0]
    val = dst.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    out = val
    for n in (*reversed(forward), *back):
        if any(isinstance(a, fx.Node) for a in (*n.args[1:], *n.kwargs.values())):
            return False
        try:
            out = n.target(out, *n.args[1:], **n.kwargs)
        except Exception:  # noqa: BLE001 - a view the fake value does not take: not undone
            return False
    return isinstance(out, torch.Tensor) and out.dtype == val.dtype and same_geometry(out, val)

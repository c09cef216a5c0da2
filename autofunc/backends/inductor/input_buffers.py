"""Graph inputs as the buffers the calls write: a repair of Inductor's policy run after the
rewrite (``InductorPolicy.repairs_after``, Note [Pipeline] step 5 in ``reinplace.py``).

``inputs_as_buffers(ctx)`` finds a buffer the rewritten graph computes, has calls write in
place and copies into a graph input at the end (AOTAutograd's epilogue ``copy_``), and makes the
input that buffer: the copy moves to where the buffer is made, every later use of the buffer
takes the input. ``regenerated_outputs_of_inputs(ctx)`` takes the outputs AOTAutograd
regenerates from an input as views of that input rather than of the value copied into it.
Both read the graph's order, node kinds and fake values; the first records each kept clone it
replaces in ``Pass.into_inputs`` for the report. Also the helpers ``input_scatters.py`` shares.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import fx

from ...passes.copies import copy_tag
from ...passes.memory_ops import VIEW_OPS
from ...passes.facts import flat_outputs
from ...passes.walks import input_copies, users_through_views, view_root
from ...regions import contains, region_of, same_geometry
from ...symbolic import known
from .copy_backs import in_memory_of, read_after, shares_memory_with_another
from .evaluation import reshape_view
from .ops import FRESH_ALIAS

__all__ = [
    "ALIASES",
    "LAYOUT_FREE",
    "VIEW_ATEN",
    "erase_unused",
    "one_layout",
    "inputs_as_buffers",
    "regenerated_only",
    "regenerated_outputs_of_inputs",
]

_aten = torch.ops.aten

# What takes a tensor's memory as it is: views, and the pass's fresh alias of an argument.
ALIASES = VIEW_OPS | {FRESH_ALIAS}
# Views that pick the same elements of a tensor whatever its strides: the ops a buffer's uses
# may take it through when the input taking its place is laid out otherwise.
LAYOUT_FREE = frozenset(
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

# The ATen view ops (not ``getitem`` of a split), which run on a fake value as they stand.
VIEW_ATEN = frozenset(t for t in VIEW_OPS if isinstance(t, torch._ops.OpOverload))


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
    (``LAYOUT_FREE``; an ``as_strided`` or a shape ``view`` depends on them). The span's other
    views address ``x``'s storage as they addressed the span's: one geometry, ``x`` at offset
    0, each inside the clone's elements.
    It pays only where calls are all that use ``v`` (through views): a node reading ``v`` after
    the move reads ``x``, and Inductor computes ``v`` into ``x`` together with that reader,
    ahead of the nodes between them, and plans its buffers otherwise (fuzz seed 20261921 #1,
    ``b.mul_(0.5); r = b.cumsum(2); t = b.permute(2, 0, 1) * 1``, no call writing ``b``'s new
    value: 480 B more). Never more memory otherwise: ``v``'s buffer, where it is still made, is
    freed at the copy, not at the end. And the calls take views of ``v``, never ``v`` itself:
    Inductor hands an extern kernel an input a ``copy_`` has just written as a buffer of its
    own, copied into the input at the end, so calls taking the input whole no longer share its
    memory (fuzz seed 20261928 #55: ``b.mul_(-1); mcache(b, ...); mlist(v, [v, b, b])`` lost
    the aliasing of ``mlist``'s arguments; 20261917 #231 whole, whose second call takes the
    buffer whole, keeps its 24 B).
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
                u > copy and u.op != "output" and not regenerated_only(u, returned)
                for a in buf.aliases
                for u in a.users
            )
            or shares_memory_with_another(dst, inputs)
            or not all(_takes_the_place(dst, a, returned) for a in buf.aliases)
            or not _span_views_fit(dst, buf, returned)
        ):
            continue
        memory = in_memory_of(dst)
        late = {n for n in memory - {copy} if n > buf.anchor and not regenerated_only(n, returned)}
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
        erase_unused(alias)


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


def one_layout(x: object, y: object) -> bool:
    """Whether the fake values ``x`` and ``y`` are tensors of one dtype and one geometry (size,
    strides, offset): any view addresses the same memory of either."""
    return (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.dtype == y.dtype
        and same_geometry(x, y)
    )


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


def _only_calls_use(buf: _Buffer, copy: fx.Node) -> bool:
    """Whether the buffer's uses, through aliases, are the copy and calls of mutable ops, one
    at least (the Note: a node reading it otherwise may cost memory), each through a view."""
    ends = [
        u
        for a in (*buf.aliases, *buf.span_views)
        for u in users_through_views(a, ALIASES)
        if u is not copy
        and u not in buf.aliases
        and u.target not in ALIASES
        and u.op != "output"  # what the caller gets: ``_takes_the_place``
    ]
    if not ends or not all(
        isinstance(u.target, torch._ops.OpOverload) and u.target._schema.is_mutable for u in ends
    ):
        return False
    # views of it, never the buffer itself (the Note: Inductor copies an input just written
    # for an extern kernel taking it whole)
    return all(
        u is copy or u in buf.aliases or u.op == "output" or u.target in VIEW_ATEN
        for a in buf.aliases
        for u in a.users
    )


def _takes_the_place(dst: fx.Node, src: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether the input ``dst`` can stand for ``src`` in every use of ``src``: one geometry,
    or the same sizes and dtype with ``src`` taken only through ``LAYOUT_FREE`` views (and
    pins); and the caller gets the memory of neither ``src`` nor a view of it (``returned``:
    ``Pass.outputs``)."""
    mine, theirs = dst.meta.get("val"), src.meta.get("val")
    if not isinstance(mine, torch.Tensor) or not isinstance(theirs, torch.Tensor):
        return False
    uses = users_through_views(src, ALIASES)
    if src in returned or any(u in returned for u in uses) or mine.dtype != theirs.dtype:
        return False
    if one_layout(mine, theirs):
        return True
    if mine.dim() != theirs.dim() or not all(
        known(a == b) for a, b in zip(mine.shape, theirs.shape)
    ):
        return False
    # the pins of a buffer are dropped (the input is laid out already: ``pin_layout``)
    views = (u for u in uses if u.target in ALIASES and not u.meta.get("autofunc.pin"))
    return all(u.target in LAYOUT_FREE for u in views)


def _span_views_fit(dst: fx.Node, buf: _Buffer, returned: set[fx.Node]) -> bool:
    """Whether each other view of the span copy addresses ``dst``'s storage as it addresses the
    span's: ``dst`` at offset 0 in the clone's geometry, the view an ``as_strided`` inside the
    clone's elements, used after the clone is made, its memory not the caller's."""
    if not buf.span_views:
        return True
    (clone,) = buf.aliases
    mine, theirs = dst.meta.get("val"), clone.meta.get("val")
    if not one_layout(mine, theirs) or not known(mine.storage_offset() == 0):
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
            # used where the input holds the clone's value: after the copy moved there
            or any(u in returned or u < buf.anchor for u in users_through_views(view, ALIASES))
        ):
            return False
    return True


def regenerated_only(node: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether ``node`` is a view whose only uses, through views, are outputs the caller does
    not get the memory of (not ``returned``: AOTAutograd regenerates them from the input)."""
    if node.target not in VIEW_OPS or node in returned:
        return False
    return all(
        u.op == "output" or (u.target in VIEW_OPS and u not in returned)
        for u in users_through_views(node, ALIASES)
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


def erase_unused(node: fx.Node) -> None:
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


def regenerated_outputs_of_inputs(ctx) -> None:
    """Take each output AOTAutograd regenerates from an input, where it is a chain of views of
    the value the graph copies into that input, as the same views of the input.

    Note [Regenerated outputs taken from the input]
    ``m1(a, b); v = a.unfold(2, 4, 5); a.mul_(2.0); return v.as_strided([4, 1, 4], [2, 8, 8],
    12)`` reaches the pass as ``m = a * 2; copy_(a, m); return as_strided(m, ...)``: the output
    views ``m``, so Inductor computes ``m`` into a buffer of its own for it and copies that
    into ``a`` (fuzz seed 20261927 #166: 96 B over PyTorch's built-in, which computes the
    smaller ``unfold`` instead). The output aliases ``a`` in eager, so AOTAutograd takes only
    its size, strides and offset from the graph and replays the view on ``a`` (Note [Outputs
    AOTAutograd regenerates from inputs] in passes/facts.py). The same views of ``a``, which
    holds ``m``'s value from the copy on, have that geometry where ``a`` and ``m`` have one
    (``as_strided`` takes absolute offsets), and cost nothing: ``m`` is then computed into
    ``a`` alone.
    """
    if not ctx.regenerated:
        return
    graph = ctx.gm.graph
    flat = flat_outputs(graph.output_node())
    sources = {
        copies[0].args[1]: dst
        for dst, copies in input_copies(graph).items()
        if len(copies) == 1 and isinstance(copies[0].args[1], fx.Node)
    }
    for i in sorted(ctx.regenerated):
        chain, node = [], flat[i] if flat is not None and i < len(flat) else None
        # (a piece of a split and a reshape Inductor lowers as a view are views too: fuzz seed
        # 20261936 #144, ``a.permute(1, 0).mul_(0.5)`` returned through ``view(12).split``)
        while (
            isinstance(node, fx.Node)
            and node not in sources
            and (node.target in VIEW_OPS or reshape_view(node))
        ):
            chain.append(node)
            node = node.args[0]
        dst = sources.get(node) if isinstance(node, fx.Node) else None
        if dst is None or not chain or not one_layout(dst.meta.get("val"), node.meta.get("val")):
            continue
        if all(len([u for u in n.users if _used(u)]) == 1 for n in chain):  # the output's alone
            chain[-1].replace_input_with(node, dst)


def _used(node: fx.Node) -> bool:
    """Whether ``node`` is used: not a view whose uses, through views, all go unused (a split
    whose pieces nothing takes, which Inductor drops)."""
    if node.target not in VIEW_OPS:
        return True
    return any(_used(u) for u in node.users)


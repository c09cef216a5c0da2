"""Emitting nodes for the re-inplace pass: views, clones and op calls with fake values.

Every function takes the pass's context ``ctx`` (``ctx.gm``, ``ctx.fake_mode``,
``ctx.for_inductor``) and inserts at the graph's current insertion point. Knows how Inductor
lowers what it emits (Notes [Clones for Inductor] and [Storage offsets]); decides nothing.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from .. import views
from .alias import VIEW_OPS

__all__ = [
    "NO_VAL",
    "add",
    "emit",
    "emit_as_strided",
    "emit_clone",
    "emit_view",
    "fake_mode_of",
    "fake_values",
    "getitem_of",
    "pin_layout",
]

_aten = torch.ops.aten


def fake_values(x: Any) -> Any:
    """``x`` (nested tuples, lists and dicts of nodes and constants) with each node replaced by
    its ``meta["val"]``; a small hand-written map, as this runs for every node the pass emits."""
    if isinstance(x, fx.Node):
        return x.meta["val"]
    if isinstance(x, (tuple, list)):
        return type(x)(fake_values(v) for v in x)
    if isinstance(x, dict):
        return {k: fake_values(v) for k, v in x.items()}
    return x


def fake_mode_of(vals: list[Any]) -> FakeTensorMode:
    mode = detect_fake_mode([v for v in vals if isinstance(v, FakeTensor)])
    if mode is None:
        raise ValueError("autofunc.reinplace needs fake tensors in meta['val']")
    return mode


NO_VAL = object()


def emit(
    ctx: Any, target: Any, args: tuple, kwargs: dict | None = None, val: Any = NO_VAL
) -> fx.Node:
    """Insert ``target(*args, **kwargs)`` with a fake ``meta["val"]``: ``val`` when the caller
    knows it, else computed by running ``target`` on fake values."""
    kwargs = kwargs or {}
    node = ctx.gm.graph.call_function(target, args, kwargs)
    if val is NO_VAL:
        fake = fake_values((args, kwargs))
        with ctx.fake_mode:
            val = target(*fake[0], **fake[1])
    node.meta["val"] = val
    return node


def emit_clone(
    ctx: Any, src: fx.Node, *, aliased: bool = False, direct: bool = False
) -> fx.Node:
    """``clone_exact(src)``: a copy with exactly ``src``'s size and strides.

    Note [Clones for Inductor]
    A contiguous tensor is copied with ``aten.clone``; a non-contiguous view that the op takes
    as it is (``direct``: a v1 argument, or a v2 base passed whole) with ``empty_strided`` +
    ``copy_``, the op call fixing the layout. (A view *of* that buffer would not fix it.)
    Anything else is copied into a fresh span as long as the storage it covers,
    ``as_strided(as_strided_scatter(zeros([extent]), src, size, stride), size, stride)``.
    The span is one-dimensional, so no layout choice of Inductor can disagree with the strides
    the graph records, and the clone is a fresh buffer. (``empty_strided`` + ``copy_`` is not
    safe under Inductor: lowering ``copy_`` into a fresh buffer may make that buffer an alias of
    the source, or re-lay it out before an ``as_strided`` reads it.) Under Inductor a buffer that several aliasing arguments share
    is also copied this way: Inductor copies an argument whose layout is not yet fixed once per
    argument, which would break their aliasing, and an ``as_strided`` view fixes it (a buffer
    written in place gets the same treatment through ``pin_layout``).
    """
    val = src.meta["val"]
    if val.is_contiguous() and not (aliased and ctx.for_inductor):
        node = emit(ctx, _aten.clone.default, (src,))
    elif direct and not aliased and src.op == "call_function" and src.target in VIEW_OPS:
        # A view copied into a fresh buffer: Inductor lowers this copy_ as a new pointwise
        # buffer, whose layout the op call then fixes to these exact strides.
        node = emit(
            ctx,
            _aten.empty_strided.default,
            (list(val.shape), list(val.stride())),
            {"dtype": val.dtype, "device": val.device},
        )
        emit(ctx, _aten.copy_.default, (node, src))
    else:
        # The span is filled through ``src``'s logical indices (as_strided_scatter into a
        # fresh zeroed span), never read as raw storage: when ``src`` is a view of a buffer the
        # graph computes, Inductor lays that buffer out as it likes (densely, say), so an
        # as_strided span of it would read elements that are not there (past its end) or
        # belong to other positions.
        extent = 1 + sum((s - 1) * st for s, st in zip(val.shape, val.stride()))
        zeros = emit(
            ctx, _aten.full.default, ([extent], 0), {"dtype": val.dtype, "device": val.device}
        )
        flat = emit(
            ctx,
            _aten.as_strided_scatter.default,
            (zeros, src, list(val.shape), list(val.stride()), 0),
        )
        node = emit_as_strided(ctx, flat, val.shape, val.stride(), 0)
    node.meta["autofunc.clone"] = True
    return node


def emit_view(ctx: Any, base: fx.Node, chain: views.ViewChain) -> fx.Node:
    node = base
    for step in chain.steps:
        if isinstance(step, views.Select):
            node = emit(ctx, _aten.select.int, (node, step.dim, step.index))
        elif isinstance(step, views.Slice):
            node = emit(ctx, _aten.slice.Tensor, (node, step.dim, step.start, step.stop, step.step))
        else:
            node = emit_as_strided(ctx, node, step.size, step.stride, step.storage_offset)
    return node


def pin_layout(ctx: Any, buf: fx.Node) -> fx.Node:
    """An ``as_strided`` alias of ``buf`` with its own size, stride and offset.

    Inductor gives the input of an ``as_strided`` exactly the strides the graph records, so the
    aliasing arguments regenerated from this alias are views of one fixed buffer (Note [Clones
    for Inductor]); without it Inductor would copy each of them separately.
    """
    if buf.op == "placeholder":  # a graph input's layout is fixed already
        return buf
    val = buf.meta["val"]
    return emit_as_strided(ctx, buf, val.shape, val.stride(), 0)


def emit_as_strided(ctx: Any, base: fx.Node, size: Any, stride: Any, rel: Any) -> fx.Node:
    """A view of ``base`` with ``size``/``stride`` at ``rel`` elements past ``base``'s offset.

    Note [Storage offsets]
    Only relative offsets are emitted: ``as_strided`` without an offset keeps its input's, and a
    nonzero ``rel`` is a ``slice`` of a flat view. An absolute offset would be read off a fake
    value, which need not match the tensor that runs (eager ``slice_scatter`` of a view keeps
    the view's offset, its meta function does not) or the node a later pass substitutes (Inductor
    swaps a scatter's fresh buffer for the graph input it re-inplaces into, at another offset).
    """
    size, stride = list(size), list(stride)
    if isinstance(rel, int) and rel == 0:
        return emit(ctx, _aten.as_strided.default, (base, size, stride))
    extent = 1 + sum((s - 1) * st for s, st in zip(size, stride))
    end = add(ctx, rel, extent)
    flat = emit(ctx, _aten.as_strided.default, (base, [end], [1]))
    shifted = emit(ctx, _aten.slice.Tensor, (flat, 0, rel, end))
    return emit(ctx, _aten.as_strided.default, (shifted, size, stride))


def add(ctx: Any, a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return emit(ctx, operator.add, (a, b))


def getitem_of(graph: fx.Graph, call: fx.Node, index: int, like: fx.Node) -> fx.Node:
    with graph.inserting_before(like):
        node = graph.call_function(operator.getitem, (call, index))
    node.meta["val"] = call.meta["val"][index]
    return node

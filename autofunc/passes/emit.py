"""Emitting nodes for the re-inplace pass: views, clones and op calls with fake values.

Every function takes the pass's context ``ctx`` (``ctx.gm``, ``ctx.fake_mode``,
``ctx.policy``) and inserts at the graph's current insertion point. Emits what the backend
lowers soundly (Notes [Clones for Inductor], [Storage offsets], [Unbacked outputs]), where the
backend's behaviours come from ``ctx.policy`` (``policy.py``) or the caller's arguments;
decides nothing. Symbolic sizes reach emitted code only as graph nodes (``geometry_of``,
``graph_arith``), never as SymInt constants.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

from .. import views
from ..errors import GraphError
from ..symbolic import (
    Arith,
    copy_extent,
    is_plain,
    is_symbolic,
    plain_fields,
)
from .copies import tag_emitted
from .targets import per_target
from ..logs import get_logger

log = get_logger("autofunc.passes.emit")

__all__ = [
    "NO_VAL",
    "emit",
    "emit_as_strided",
    "CloneKind",
    "emit_clone",
    "emit_view",
    "fake_mode_of",
    "fake_value",
    "fake_values",
    "geometry_of",
    "getitem_of",
    "graph_arith",
    "inherit_unbacked_bindings",
    "new_node",
    "pin_layout",
]

_aten = torch.ops.aten


def fake_values(x: Any) -> Any:
    """``x`` (nested tuples, lists and dicts of nodes and constants) with each node replaced by
    its ``meta["val"]``; a small hand-written map, as this runs for every node the pass emits."""
    if isinstance(x, fx.Node):
        return x.meta["val"]
    if isinstance(x, (tuple, list)):
        return type(x)([fake_values(v) for v in x])
    if isinstance(x, dict):
        return {k: fake_values(v) for k, v in x.items()}
    return x


def fake_mode_of(vals: list[Any]) -> FakeTensorMode:
    mode = detect_fake_mode([v for v in vals if isinstance(v, FakeTensor)])
    if mode is None:
        raise GraphError("autofunc.reinplace needs fake tensors in meta['val']")
    return mode


NO_VAL = object()


def emit(
    ctx: Any, target: Any, args: tuple, kwargs: dict | None = None, val: Any = NO_VAL
) -> fx.Node:
    """Insert ``target(*args, **kwargs)`` with a fake ``meta["val"]``: ``val`` when the caller
    knows it, else computed by running ``target`` on fake values."""
    kwargs = kwargs or {}
    node = new_node(ctx.gm.graph, target, args, kwargs)
    node.meta["val"] = fake_value(ctx.fake_mode, target, args, kwargs) if val is NO_VAL else val
    tag_emitted(ctx, node)  # Note [Every copy in the report] in copies.py
    return node


def fake_value(mode: FakeTensorMode, target: Any, args: tuple, kwargs: dict) -> Any:
    """The fake value of ``target(*args, **kwargs)`` (arguments: nodes and constants), computed
    in ``mode``: a view's by its meta kernel (Note [Fake values of emitted views]), anything
    else's through the fake mode's dispatch."""
    fake_args, fake_kwargs = fake_values((args, kwargs))
    if not kwargs and target in _META_VIEWS:
        val = _view_val(mode, target, fake_args)
        if val is not None:
            return val
    with mode:
        return target(*fake_args, **fake_kwargs)


def new_node(graph: fx.Graph, target: Any, args: tuple, kwargs: dict | None = None) -> fx.Node:
    """``graph.call_function(target, args, kwargs)`` at the insertion point, for the pass's own
    nodes.

    Note [Emitting a node]
    ``Graph.create_node`` scans the arguments of a call for raw SymInts (a warning on recent
    torch: a SymInt in an FX argument is no code) with a generic pytree walk, which costs a
    third of the call. The pass never emits one (symbolic sizes reach code as nodes,
    ``geometry_of``), so it creates the node bare and then sets its arguments, which records
    the uses exactly as the constructor does. The name FX derives from the target is computed
    once per target (the same name, made unique by the graph's namespace as before).
    """
    node = graph.create_node("call_function", target, name=_name_of(target))
    if args:
        node.args = args
    if kwargs:
        node.kwargs = kwargs
    return node


@per_target  # Note [Facts per target]
def _name_of(target: Any) -> str:
    """The name FX gives ``target``'s nodes (before a graph makes it unique)."""
    return fx.Graph()._target_to_str(target)


_META_VIEWS = frozenset(
    {
        _aten.select.int,
        _aten.slice.Tensor,
        _aten.as_strided.default,
        _aten.view.dtype,
        _aten.view.default,
        _aten.alias.default,
    }
)


def _view_val(mode: FakeTensorMode, target: Any, args: tuple) -> FakeTensor | None:
    """The fake value of a view op (one of ``_META_VIEWS``), computed by its meta kernel
    directly; ``None`` where that path does not apply (then the caller dispatches through the
    fake mode).

    Note [Fake values of emitted views]
    The pass emits a few view nodes per call (regenerated arguments, pinned layouts), and each
    needs ``meta["val"]``. Dispatching them through FakeTensorMode costs most of the pass's time
    (argument hashing for its cache, output reconstruction); a view's value is only its
    geometry over the base's fake storage, which the meta kernel computes, exactly as the fake
    mode does inside its own dispatch, and wraps it without entering it in the converter's memo
    (the meta tensor is fresh, so no one looks it up; a memo entry is a weak reference more
    per view). Any failure falls back to that dispatch.

    The meta kernel runs below the autograd and ADInplaceOrView keys, as a kernel does inside
    the fake mode's own dispatch: above them, the view op would also record the meta result as
    a view of the base (view metadata and a replay function), which costs a third of the call
    and which ``FakeTensor`` drops anyway when it wraps the meta tensor (the value is a fresh
    tensor object over the base's fake storage either way, ``_is_view()`` false, with the same
    sizes, strides, offset, dtype, device and version counter).

    Inside Inductor's compile the Python dispatcher is on, and it runs a view op through
    Python: it looks for a Python kernel of the op (slice's meta kernel is one, a Python
    decomposition written to decide symbolic sizes without guards) before the dispatcher's own.
    Where the base's geometry and every other argument are plain ints (or ``None``, a dtype, a
    list of ints: ``_plain_view``) the meta kernel runs with the Python dispatcher off: the
    kernel that runs is then the C++ one eager runs on real tensors, whose geometry is by
    definition the one the op has at run time, at about a third less cost per view. Anything
    symbolic keeps the Python dispatcher, whose kernels decide it without a guard.
    """
    base = args[0] if args else None
    if type(base) is not FakeTensor or base.fake_mode is not mode:
        return None
    try:
        with in_kernel_invocation_manager(mode), torch._C._AutoDispatchBelowADInplaceOrView():
            if _plain_view(base, args):
                with torch._C._DisablePythonDispatcher():
                    out = target(*args)
            else:
                out = target(*args)
        return FakeTensor(mode, out, base.device)
    except Exception:  # noqa: BLE001 - an API that moved, a check that needs the mode
        log.debug("%s: no meta view value, running its fake kernel", target, exc_info=True)
        return None


def _plain_view(base: FakeTensor, args: Sequence) -> bool:
    """Whether a view of ``base`` with ``args`` (``base`` first) involves no symbolic value
    (Note [Fake values of emitted views])."""
    if base._has_symbolic_sizes_strides or type(base.storage_offset()) is not int:
        return False
    return all(
        a is None or is_plain(tuple(a) if isinstance(a, list) else a) for a in args[1:]
    )


class CloneKind(enum.Enum):
    """How a buffer is copied (Note [Clones for Inductor]): what the policy picks
    (``Policy.copy``) and :func:`emit_clone` emits."""

    DENSE = "aten.clone, contiguous (Note [A buffer that overlaps itself])"
    DENSE_PINNED = "aten.clone, contiguous, then pinned (pin_layout)"
    CLONE = "aten.clone"
    # the two above, of a pin of the source (``Policy.pin_source``)
    CLONE_OF_PIN = "aten.clone of a pin of the source"
    DENSE_PINNED_OF_PIN = "aten.clone of a pin of the source, contiguous, then pinned"
    EMPTY_COPY = "empty_strided + copy_, the op call fixing the layout"
    SPAN = "as_strided_scatter into a fresh zeroed span, viewed with as_strided"

    def of_pinned_source(self) -> CloneKind:
        """This copy, of a pin of its source (``Policy.pin_source``) where it reads the source
        whole (``CLONE``, ``DENSE_PINNED``); any other copy as it is."""
        return _OF_PIN.get(self, self)


_OF_PIN = {
    CloneKind.CLONE: CloneKind.CLONE_OF_PIN,
    CloneKind.DENSE_PINNED: CloneKind.DENSE_PINNED_OF_PIN,
}


def emit_clone(ctx: Any, src: fx.Node, *, kind: CloneKind) -> fx.Node:
    """``clone_exact(src)``: a copy with exactly ``src``'s size and strides, of ``kind`` (the
    policy's choice, ``Policy.copy``).

    Note [Clones for Inductor]
    Under a backend that keeps the recorded strides (``GENERIC``) a contiguous tensor is copied
    with ``aten.clone`` and any other with ``empty_strided`` + ``copy_``. Under Inductor
    (``InductorPolicy.copy``) a contiguous tensor is copied with ``aten.clone``; a
    non-contiguous view that the op takes as it is (a v1 argument, or a v2 base passed whole)
    with ``empty_strided`` + ``copy_``, the op call fixing the layout. (A view *of* that buffer
    would not fix it.)
    Anything else is copied into a fresh span as long as the storage it covers,
    ``as_strided(as_strided_scatter(zeros([extent]), src, size, stride), size, stride)``.
    The span is one-dimensional, so no layout choice of Inductor can disagree with the strides
    the graph records, and the clone is a fresh buffer. (``empty_strided`` + ``copy_`` is not
    safe under Inductor: lowering ``copy_`` into a fresh buffer may make that buffer an alias of
    the source, or re-lay it out before an ``as_strided`` reads it.) Under Inductor a buffer that
    several aliasing arguments share is also copied this way: Inductor copies an argument whose
    layout is not yet fixed once per argument, which would break their aliasing, and an
    ``as_strided`` view fixes it (a buffer written in place gets the same treatment through
    ``pin_layout``). Symbolic sizes and strides are passed as nodes (``geometry_of``), never as
    SymInt constants, and a contiguity that cannot be decided without a guard takes the span
    copy (Note [Undecided geometry]).

    Note [A buffer that overlaps itself]
    A value the graph computes can reach the pass as an ``expand`` (stride 0): Inductor's
    joint-graph patterns rewrite, for example, ``zeros(...).cumsum(1)`` into an expanded
    ``iota``, where eager computed a dense tensor. No copy with those strides can be written (two
    elements share one location), so it is copied densely (``clone``, contiguous), which is the
    tensor eager had. A graph input that overlaps itself is the caller's own tensor and keeps
    the exact copy. Unless the op takes that copy whole and alone, it is pinned (``pin_layout``):
    Inductor computes a view of a buffer it has not computed yet into a buffer of its own, so
    the op would write a copy of the view (fuzz seed 20261269 #257: ``m3([r2, r2.narrow(1, 0,
    1)], a)``, where ``r2`` missed the writes through the narrow; the built-in is wrong too).
    """
    val = src.meta["val"]
    if kind in (CloneKind.CLONE_OF_PIN, CloneKind.DENSE_PINNED_OF_PIN):
        src = pin_layout(ctx, src)
        kind = CloneKind.CLONE if kind is CloneKind.CLONE_OF_PIN else CloneKind.DENSE_PINNED
    if kind in (CloneKind.DENSE, CloneKind.DENSE_PINNED):
        # Note [A buffer that overlaps itself]: a dense copy, not one with these strides.
        node = emit(ctx, _aten.clone.default, (src,), {"memory_format": torch.contiguous_format})
        if kind is CloneKind.DENSE_PINNED:
            node = pin_layout(ctx, node)
    elif kind is CloneKind.CLONE:
        node = emit(ctx, _aten.clone.default, (src,))
    elif kind is CloneKind.EMPTY_COPY:
        # A view copied into a fresh buffer: Inductor lowers this copy_ as a new pointwise
        # buffer, whose layout the op call then fixes to these exact strides.
        size, stride = geometry_of(ctx, src)
        node = emit(
            ctx,
            _aten.empty_strided.default,
            (size, stride),
            {"dtype": val.dtype, "device": val.device},
        )
        emit(ctx, _aten.copy_.default, (node, src))
    else:
        # The span is filled through ``src``'s logical indices (as_strided_scatter into a
        # fresh zeroed span), never read as raw storage: when ``src`` is a view of a buffer the
        # graph computes, Inductor lays that buffer out as it likes (densely, say), so an
        # as_strided span of it would read elements that are not there (past its end) or
        # belong to other positions.
        size, stride = geometry_of(ctx, src)
        extent = copy_extent(size, stride, graph_arith(ctx))
        zeros = emit(
            ctx, _aten.full.default, ([extent], 0), {"dtype": val.dtype, "device": val.device}
        )
        flat = emit(ctx, _aten.as_strided_scatter.default, (zeros, src, size, stride, 0))
        node = emit_as_strided(ctx, flat, size, stride, 0)
    node.meta["autofunc.clone"] = True
    return node


def geometry_of(ctx: Any, node: fx.Node) -> tuple[list, list]:
    """``node``'s size and stride for emitted code: ints, and ``sym_size`` / ``sym_stride`` nodes
    for the symbolic entries (a SymInt in an FX argument is not code: it prints as a free name).
    """
    val = node.meta["val"]
    size, stride = [], []
    for d, (n, st) in enumerate(zip(val.shape, val.stride())):
        size.append(emit(ctx, _aten.sym_size.int, (node, d), val=n) if is_symbolic(n) else int(n))
        stride.append(
            emit(ctx, _aten.sym_stride.int, (node, d), val=st) if is_symbolic(st) else int(st)
        )
    return size, stride


def emit_view(
    ctx: Any,
    base: fx.Node,
    chain: views.ViewChain,
    shared: dict | None = None,
    read_only: bool = False,
) -> fx.Node:
    """``chain`` applied to ``base``, one node per step (for a ``read_only`` argument each
    step as the policy's ``read_view`` makes it).

    ``shared`` (one dict per insertion point) lets the chains of one call share their common
    prefixes: ``cache[l][0]`` and ``cache[l][1]`` take one ``select(cache, 0, l)``. A chain's
    last node is never shared, so every regenerated argument stays a node of its own (Note
    [Arguments keep their identity] in hops/common.py decides aliases of equal arguments).
    """
    node = base
    steps = chain.steps
    graph = _StepGraph(ctx, read_only)
    for i, step in enumerate(steps):
        key = _share_key(node, step) if shared is not None and i < len(steps) - 1 else None
        if key is not None and key in shared:
            node = shared[key]
            continue
        node = step.emit(node, graph)  # each step emits its own ATen call(s)
        if key is not None:
            shared[key] = node
    return node


def _share_key(node: fx.Node, step: Any) -> tuple | None:
    """``(node, step)`` when every field of the step is a plain int (or tuple of them) or a
    dtype, else ``None``: a SymInt cannot be hashed and compares to a SymBool, and a node is
    not compared by value."""
    return (node, step) if plain_fields(step) else None


class _StepGraph:
    """``views.steps.Graph`` on ``ctx``'s graph: where a view step emits its own ATen calls."""

    def __init__(self, ctx: Any, read_only: bool = False) -> None:
        self.ctx = ctx
        self.read_only = read_only

    @property
    def arith(self) -> Arith:
        return graph_arith(self.ctx)

    def call(self, target: Any, args: tuple) -> fx.Node:
        if self.read_only:
            return self.ctx.policy.read_view(self.ctx, target, args)
        return emit(self.ctx, target, args)




def pin_layout(ctx: Any, buf: fx.Node) -> fx.Node:
    """An ``as_strided`` alias of ``buf`` with its own size, stride and offset.

    Inductor gives the input of an ``as_strided`` exactly the strides the graph records, so the
    aliasing arguments regenerated from this alias are views of one fixed buffer (Note [Clones
    for Inductor]); without it Inductor would copy each of them separately.
    """
    if buf.op == "placeholder":  # a graph input's layout is fixed already
        return buf
    pinned = emit_as_strided(ctx, buf, *geometry_of(ctx, buf), 0)
    pinned.meta["autofunc.pin"] = True
    return pinned


def emit_as_strided(ctx: Any, base: fx.Node, size: Any, stride: Any, rel: Any) -> fx.Node:
    """A view of ``base`` with ``size``/``stride`` at ``rel`` elements past ``base``'s offset.

    Note [Storage offsets]
    Only relative offsets are emitted: ``as_strided`` without an offset keeps its input's, and a
    nonzero ``rel`` is a ``slice`` of a flat view. An absolute offset would be read off a fake
    value, which need not match the tensor that runs (eager ``slice_scatter`` of a view keeps
    the view's offset, its meta function does not) or the node a later pass substitutes (Inductor
    swaps a scatter's fresh buffer for the graph input it re-inplaces into, at another offset).
    ``size``, ``stride`` and ``rel`` hold ints and nodes (never SymInts), and the arithmetic on
    them is emitted (``graph_arith``).
    """
    return views.AsStrided(size, stride, rel).emit(base, _StepGraph(ctx))


class _GraphArith:
    """:class:`~autofunc.symbolic.Arith` on ints and FX nodes: folds ints, emits the rest."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def value(self, x: Any) -> Any:
        return fake_values(x)

    def _apply(self, fn: Any, a: Any, b: Any) -> Any:
        if isinstance(a, int) and isinstance(b, int):
            return fn(a, b)
        return emit(self.ctx, fn, (a, b))

    def add(self, a: Any, b: Any) -> Any:
        if isinstance(a, int) and a == 0:
            return b
        if isinstance(b, int) and b == 0:
            return a
        return self._apply(operator.add, a, b)

    def mul(self, a: Any, b: Any) -> Any:
        if isinstance(a, int) and a == 1:
            return b
        if isinstance(b, int) and b == 1:
            return a
        return self._apply(operator.mul, a, b)

    def min(self, a: Any, b: Any) -> Any:
        return self._apply(torch.sym_min, a, b)


def graph_arith(ctx: Any) -> Arith:
    """Arithmetic that emits its symbolic steps into ``ctx``'s graph (ints stay ints)."""
    return _GraphArith(ctx)


def inherit_unbacked_bindings(call: fx.Node, hop: fx.Node, num_returns: int) -> None:
    """Give the direct op call that replaces ``hop`` the bindings of the unbacked symbols (data-
    dependent sizes) the op's outputs introduced, with the paths into ``hop``'s flat outputs
    rewritten into paths into the call's result.

    Note [Unbacked outputs]
    A pass that re-runs fake propagation (Inductor's FakeTensorUpdater, after the post-grad
    passes) runs the op's fake kernel again for the new call, which makes fresh unbacked
    symbols; ``unbacked_bindings`` is how it learns that they are the ones the rest of the graph
    already uses (``rebind_unbacked``). Without them it compares unrelated symbols downstream and
    fails (or keeps two names for one size).
    """
    bindings = hop.meta.get("unbacked_bindings")
    if not bindings or num_returns == 0:
        return
    out = {}
    for symbol, path in bindings.items():
        first = path[0] if path else None
        index = getattr(first, "idx", None)
        if index is None or index >= num_returns:
            continue  # a new buffer: a clone's sizes are its source's, so nothing binds there
        out[symbol] = path[1:] if num_returns == 1 else path
    if out:
        call.meta["unbacked_bindings"] = out


def getitem_of(graph: fx.Graph, call: fx.Node, index: int, like: fx.Node) -> fx.Node:
    with graph.inserting_before(like):
        node = new_node(graph, operator.getitem, (call, index))
    node.meta["val"] = call.meta["val"][index]
    return node

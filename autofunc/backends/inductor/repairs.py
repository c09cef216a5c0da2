"""The graph repairs of Inductor's policy (``policy.py``), run before the facts
(``REPAIRS_BEFORE``) and after the rewrite (``REPAIRS_AFTER``), Note [Pipeline] steps 1 and 5
in ``reinplace.py``; each repair names the Inductor behaviour it works around. Imports the
pass's steps but not ``reinplace.py``, nor any Inductor configuration.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef

from ...hops.adapter import mutation_targets
from ...logs import get_logger
from ...passes.context import Pass
from ...passes.emit import emit_clone
from ...passes.facts import flat_outputs
from ...passes.memory_ops import VIEW_OPS
from ...passes.walks import copy_calls, input_copies, users_through_views, view_root, view_walk
from .share_views import share_input_views

__all__ = ["INPLACEABLE", "REPAIRS_AFTER", "REPAIRS_BEFORE"]

log = get_logger("autofunc.backends.inductor.repairs")

_aten = torch.ops.aten


def _as_strided_of_roots(graph: fx.Graph) -> None:
    """Rewrite ``as_strided(view, size, stride, offset)`` of a view of a computed buffer into
    ``as_strided(buffer, size, stride, offset)``.

    Note [as_strided of a view under Inductor]
    ``as_strided`` takes its storage offset absolutely, so both forms are one tensor in eager.
    Inductor, though, computes a view of a buffer it has not realized as a buffer of the view's
    elements only and applies the offset to that: the result reaches past it (fuzz seed
    20261125 #242 read uninitialized memory, #121 returned a tensor outside its storage; plain
    aten code does the same). Once the pass moves that buffer's other uses (a clone of it, a
    write in place), nothing else makes Inductor realize it whole, so the pass asks for the
    buffer itself. Only explicit int offsets over a chain of same-dtype views are rewritten.
    """
    for node in list(graph.find_nodes(op="call_function", target=_aten.as_strided.default)):
        src = node.args[0]
        if len(node.args) != 4 or node.kwargs or not isinstance(node.args[3], int):
            continue
        root = view_root(src, _SAME_DTYPE_VIEWS)
        if root is src or not isinstance(root, fx.Node) or root.op == "placeholder":
            continue
        sval, rval = src.meta.get("val"), root.meta.get("val")
        if not (isinstance(sval, torch.Tensor) and isinstance(rval, torch.Tensor)):
            continue
        if sval.dtype != rval.dtype or StorageWeakRef(sval.untyped_storage()) != StorageWeakRef(
            rval.untyped_storage()
        ):
            continue
        node.args = (root, *node.args[1:])


@functools.cache
def _inductor_drops_view_offsets() -> bool:
    """Whether this torch's Inductor lowers ``as_strided(view, size, stride)`` (no offset) at
    offset 0 of the view's buffer instead of at the view's own offset (pytorch#175325, fixed by
    pytorch#180581 after torch 2.11). Read off the lowering's code: the fix reads the view's
    layout offset when none is given (``x.get_layout().offset``), so its code names both
    ``get_layout`` and ``offset``; the lowerings before it name neither. (Its code, not its
    source text: reading and tokenizing Inductor's lowering module cost milliseconds of the
    first compile.) Where the lowering has no code object, the version decides."""
    import inspect

    from torch._inductor import lowering

    code = getattr(inspect.unwrap(lowering.as_strided), "__code__", None)
    if code is None:
        log.debug("as_strided lowering has no code object; the torch version decides")
        return torch.__version__ < "2.12"
    return not {"get_layout", "offset"} <= set(code.co_names)


def _explicit_as_strided_offsets(graph: fx.Graph, inputs_too: bool = True) -> None:
    """Give every offset-less ``as_strided`` of a view (of a computed buffer only, unless
    ``inputs_too``) the view's root and an explicit offset:
    ``as_strided(view, size, stride)`` -> ``as_strided(root, size, stride, k)``, where ``k`` is
    the view's offset from the root's start (through a ``view(dtype)`` of the root where the
    view has another dtype of the same item size).

    Note [as_strided offsets on torch 2.11]
    The pass emits relative views (Note [Storage offsets]): ``as_strided`` without an offset
    keeps its input's. Inductor up to torch 2.11 drops that offset when the input is a view
    (pytorch#175325): the op then writes and reads at the start of the view's buffer, a silent
    wrong result (on torch 2.11: fuzz seed 1234 #203, seed 0 #0, and the corpus program
    ``kv_fp8_whole_layer`` on CUDA, whose second layer was written over the first). That
    Inductor takes an explicit offset from the start of the memory it holds: a buffer it
    computes starts at offset 0, and a graph input at its own data pointer (later torch rebases
    explicit offsets on inputs, pytorch#184232, and has no such bug, so this runs only where
    the bug is). Only static offsets are rewritten. A scatter into an input that Inductor may
    re-inplace counts as that input: its memory is the input's then.
    """
    for node in list(graph.find_nodes(op="call_function", target=_aten.as_strided.default)):
        if len(node.args) != 3 or node.kwargs:
            continue
        src = node.args[0]
        root = view_root(src)
        if root is src or not isinstance(root, fx.Node):
            continue
        # a scatter Inductor may re-inplace into an input becomes that input's memory, whose
        # explicit offsets later torch rebases on the input's own (fuzz seed 20261266 #54)
        if (root.op == "placeholder" or _written_input(root) is not None) and not inputs_too:
            continue
        sval, rval = src.meta.get("val"), root.meta.get("val")
        if not (isinstance(sval, torch.Tensor) and isinstance(rval, torch.Tensor)):
            continue
        offset = sval.storage_offset() - rval.storage_offset()
        if not isinstance(offset, int) or sval.dtype.itemsize != rval.dtype.itemsize:
            continue
        base = root
        if rval.dtype != sval.dtype:
            with graph.inserting_before(node):
                base = graph.call_function(_aten.view.dtype, (root, sval.dtype))
            base.meta["val"] = rval.view(sval.dtype)
        node.args = (base, *node.args[1:], offset)


# The views that keep their input's dtype.
_SAME_DTYPE_VIEWS = VIEW_OPS - {_aten.view.dtype}


def _keep_old_copy_sources(graph: fx.Graph) -> None:
    """Note [Copies of inputs that the graph mutates]: ``dst[:] = src[:, :]; op(src)`` must
    give ``dst`` the old ``src``. Inductor's ``remove_noop_ops`` (before this pass) replaces the
    functional copy of ``src`` by ``src`` itself, leaving the epilogue ``copy_(dst, src)`` after
    ``copy_(src, new)``: it now reads the new value (pytorch#198131, which also hits a plain
    ``src.add_(1)``). In a functional graph a graph input always denotes its value on entry, so
    such a source is copied where it is defined, before anything writes it; the copy is a lazy
    read Inductor realizes when the input is mutated, and the analysis sees it as a read of the
    old value (the op then writes ``src`` only if that is still sound)."""
    order: dict[fx.Node, float] = {n: i for i, n in enumerate(graph.nodes)}
    first_write = {dst: order[copies[0]] for dst, copies in input_copies(graph).items()}
    inputs = graph.find_nodes(op="placeholder")
    for n in copy_calls(graph):
        src, dst = n.args[1], n.args[0]
        if not isinstance(src, fx.Node) or not isinstance(dst, fx.Node):
            continue
        base = view_root(src)
        if base is view_root(dst) or base.op != "placeholder":
            continue
        if _hoist_copy(n, base, order, inputs):
            continue
        if first_write.get(base, order[n]) >= order[n]:
            continue
        anchor = src if not inputs or order[src] > order[inputs[-1]] else inputs[-1]
        with graph.inserting_after(anchor):
            old = graph.call_function(_aten.clone.default, (src,))
        old.meta["val"] = src.meta["val"].clone()
        n.replace_input_with(src, old)


def _hoist_copy(
    copy: fx.Node, base: fx.Node, order: dict[fx.Node, float], inputs: list[fx.Node]
) -> bool:
    """Move the epilogue ``copy_(dst, src)`` of an input ``dst`` to before anything may write
    ``src``'s input ``base``, where that is sound; returns whether it was moved.

    Note [Copies moved before the writes]
    ``dst[:] = src; op(src)`` copies ``src``'s old value into ``dst`` at the end of the graph,
    after the op; kept there, the copy is a read of the old ``src`` after the call, and the op
    must write a clone of it. Nothing orders the copy that late but the functional form: ``dst``
    is the graph's to write once nothing reads its old value any more. So the copy moves to
    just after the last reader of ``dst`` (and ``src``'s definition), when that is before the
    first node that may write ``base``'s memory: a mutation node taking it or a view of it, a
    copy into it, or a scatter into it that Inductor may re-inplace. Inductor lowers a copy into
    an input wherever it stands and orders later writes of ``src`` after it.
    """
    dst = copy.args[0]
    if dst.op != "placeholder":
        return False
    first_writer = min(
        (order[u] for u in users_through_views(base) if _may_write(u, base)), default=None
    )
    if first_writer is None or first_writer > order[copy]:
        return False  # nothing writes ``src`` before the copy reads it
    readers = [u for u in users_through_views(dst) if u is not copy]
    anchor = max([copy.args[1], inputs[-1], *readers], key=order.__getitem__)
    if order[anchor] >= first_writer:
        return False
    anchor.append(copy)
    order[copy] = order[anchor] + 0.5  # between the anchor and the node after it
    return True


def _may_write(user: fx.Node, base: fx.Node) -> bool:
    """Whether ``user`` (a user of ``base`` or of a view of it) may write ``base``'s memory once
    the pass and Inductor's re-inplacing have run."""
    if user.op != "call_function":
        return False
    if user.target in mutation_targets() or isinstance(user.target, torch._ops.HigherOrderOperator):
        return True
    if user.target is _aten.copy_.default or user.target in INPLACEABLE:
        return view_root(user.args[0]) is base
    return isinstance(user.target, torch._ops.OpOverload) and user.target._schema.is_mutable


# Functional ops that Inductor's own re-inplacing (which runs after this pass) may turn into a
# write of their first argument: the result then *is* that argument's buffer.
INPLACEABLE = frozenset(
    {
        _aten.select_scatter.default,
        _aten.slice_scatter.default,
        _aten.diagonal_scatter.default,
        _aten.as_strided_scatter.default,
        _aten.index_put.default,
        _aten._unsafe_index_put.default,
    }
)
_VIEWS_AND_INPLACEABLE = VIEW_OPS | INPLACEABLE


def _written_input(node: fx.Node) -> fx.Node | None:
    """The graph input whose buffer ``node``'s value may end up in after Inductor re-inplaces
    the scatters it is built from (through views, and reshapes that view their input: fuzz
    seed 20261920 #32, ``v7 = b.narrow(1, 1, 3).view(5, 9); v8 = v7.select(0, 2); op(v8, ...);
    v7.mul_(0.5); return v8.clone()``, the clone dropped by ``remove_noop_ops``, returned the
    input's memory), or ``None``."""
    from .evaluation import reshape_view  # (evaluation.py imports this module)

    steps: list[fx.Node] = []
    root = node
    while True:
        *more, root = view_walk(root, _VIEWS_AND_INPLACEABLE)
        steps += more
        if not reshape_view(root):
            break
        steps.append(root)
        root = root.args[0]
    scattered = any(n.target in INPLACEABLE for n in steps)
    return root if scattered and root.op == "placeholder" else None


def _separate_outputs_from_inputs(ctx: Pass) -> None:
    """Note [Returned scatters under Inductor]: ``y = x.select_scatter(...); op(y[1]);
    x.copy_(y); return y`` returns a tensor of its own in eager. Inductor re-inplaces a scatter
    into a graph input whenever the graph copies a value back into that input, without looking
    at the graph's outputs, so ``y`` would come back as ``x`` itself (pytorch#195451). Each
    output built by scatters into such an input is returned as a copy instead (eager holds two
    tensors as well). An output AOTAutograd regenerates from the input is the input's memory in
    eager and whatever the graph returns (Note [Outputs AOTAutograd regenerates from inputs]):
    ``op(b, b.T); b.diagonal().mul_(2); return b.unfold(1, 1, 4)`` is not copied."""
    graph = ctx.gm.graph
    copied_back = set(input_copies(graph))
    out = graph.output_node()
    clones: dict[fx.Node, fx.Node] = {}

    def separate(arg: Any) -> Any:
        if not isinstance(arg, fx.Node) or _written_input(arg) not in copied_back:
            return arg
        if arg not in clones:
            point = _copy_point(ctx, arg, out)
            root = view_root(arg)
            if root is not arg and point is out:
                # a view of the scatter, taken after the copy-back: taken before it instead
                point = _copy_point(ctx, root, out)
                if point is not out and not _views_before(arg, root, point):
                    point = out
            with graph.inserting_before(point):
                clones[arg] = emit_clone(ctx, arg, kind=ctx.policy.copy(ctx, arg))
        return clones[arg]

    flat = flat_outputs(out)
    if flat is not None and ctx.regenerated:
        kept = [v if i in ctx.regenerated else separate(v) for i, v in enumerate(flat)]
        out.args = (type(flat)(kept),)
    else:
        out.args = fx.node.map_arg(out.args, separate)


def _views_before(view: fx.Node, root: fx.Node, point: fx.Node) -> bool:
    """Move the chain of views from ``root`` to ``view`` before ``point`` where it stands after
    it (views read nothing: only their own inputs must come first); whether it is there now."""
    chain = list(itertools.takewhile(lambda n: n is not root, view_walk(view)))
    chain.reverse()
    moving = [n for n in chain if n > point]
    placed = set(chain) - set(moving)
    for n in moving:
        if any(a > point and a not in placed for a in n.all_input_nodes if a not in chain):
            return False
    for n in moving:
        point.prepend(n)
    return True


def _copy_point(ctx: Pass, arg: fx.Node, out: fx.Node) -> fx.Node:
    """Where to copy the returned ``arg``: before the first later scatter built on its memory
    (Inductor re-inplaces such a scatter into the input too, and would overwrite ``arg``'s
    memory before a copy placed after it reads it; fuzz seed 20261128 #6), or before the copy
    of a later value back into that input (``t0 = b.clone(); op(b, b, b); t0.diagonal(-1)
    .mul_(2); return t0``: the scatter is re-inplaced into ``b`` once ``remove_noop_ops`` drops
    the clone, and the copy-back of the op's value overwrote it before the output was copied;
    fuzz seed 20261285 #231, PyTorch's built-in wrong too), else before the output. A graph
    input is copied at the end: its returned value is the one copied back."""
    if arg.op == "placeholder":
        return out
    written = _written_input(arg)
    node = arg.next
    while node is not out:
        base = node.args[0] if node.op == "call_function" and node.args else None
        if (
            node.target in INPLACEABLE
            and isinstance(base, fx.Node)
            and ctx.analysis.same_memory(base, arg)
        ):
            return node
        if written is not None and node.target is _aten.copy_.default and base is written:
            return node  # the copy-back of a later value into that input (fuzz 20261285 #231)
        node = node.next
    return out


def _share_input_views(ctx: Pass) -> None:
    """Fewer view nodes for Inductor to lower (``share_views.py``)."""
    share_input_views(ctx.gm.graph)


def _explicit_offsets_where_dropped(ctx: Pass) -> None:
    """``_explicit_as_strided_offsets`` where this torch's Inductor drops a view's offset: on
    every view where it drops them all (Note [as_strided offsets on torch 2.11]), else on the
    views of computed buffers; asked when the pass runs, not at import.

    Note [Pinning a view of a computed buffer]
    Later Inductor keeps the offset of a view only when the view has a layout: a view of a
    buffer not computed yet (``ones(5).select(0, 3)``, the base of a call once
    ``remove_noop_ops`` dropped the program's clone) has none, and ``as_strided`` of it lands at
    offset 0 (fuzz seed 20261253 #28: an op given that element twice, its layout pinned,
    wrote element 0 and the graph returned element 3). A buffer Inductor computes starts at
    offset 0, so the explicit offset is right there on every version.
    """
    _explicit_as_strided_offsets(ctx.gm.graph, inputs_too=_inductor_drops_view_offsets())


# Aten ops that make a fresh buffer of unspecified contents from sizes alone (``torch.empty``,
# ``empty_like`` and ``new_empty`` reach the post-grad graph as one of these).
_FRESH_ALLOCATIONS = (
    _aten.empty.memory_format,
    _aten.empty_strided.default,
    _aten.empty_permuted.default,
)


def _allocate_at_first_use(ctx: Pass) -> None:
    """Move each fresh allocation (``_FRESH_ALLOCATIONS``) down to just before its first user.

    Note [Out buffers allocated where they are first used]
    ``r = torch.empty(...); op(r, x)`` gives the call's HOP the fresh ``r`` as a buffer.
    Inductor's ``reorder_for_locality`` (before the post-grad passes) walks the graph backwards
    and puts each node's producers just before it, one by one in the order its arguments and
    keyword arguments are listed: the first listed lands first, the next between it and the
    node, and each producer's own producers before that producer. An autofunc HOP lists its
    buffers before the op's inputs (v2's ``_bases`` come first; v1 passes the arguments in
    schema order, and vLLM's out-buffer ops take ``result`` first), so ``r`` lands before
    everything that computes ``x``. In a chain of out-buffer ops between matmuls (vLLM's fused
    norm + fp8 quant ops) the next layer's output is then allocated while the previous layer's
    output and the matmul's input are still alive, and Inductor's memory planning, which
    follows the graph's order, cannot hand it a buffer freed after that point: a new
    allocation per layer (PyTorch's ``auto_functionalized_v2`` lists its bases last, so the
    same walk leaves ``r`` next to the call). Written in place, ``r`` is first used by the
    direct call (or the views and layout pin made for it), so it moves to just before that
    user. Sound: such a node has no tensor inputs (its sizes are defined where it stood,
    before the new place) and reads and writes no memory, so running it later changes no
    value, and every user still comes after it.
    """
    graph = ctx.gm.graph
    for target in _FRESH_ALLOCATIONS:
        for node in list(graph.find_nodes(op="call_function", target=target)):
            if not node.users or any(
                isinstance(a.meta.get("val"), torch.Tensor) for a in node.all_input_nodes
            ):
                continue
            first = min(node.users)
            if first is not node.next:
                first.prepend(node)


# The repairs of Inductor's policy (``policy.InductorPolicy``), in the order they run.
REPAIRS_BEFORE = (
    _keep_old_copy_sources,  # Note [Copies of inputs that the graph mutates]
    _as_strided_of_roots,  # Note [as_strided of a view under Inductor]
)
REPAIRS_AFTER = (
    _separate_outputs_from_inputs,  # Note [Returned scatters under Inductor]
    _share_input_views,
    _explicit_offsets_where_dropped,  # Notes [as_strided offsets on torch 2.11], [Pinning a
    # view of a computed buffer]
    _allocate_at_first_use,  # Note [Out buffers allocated where they are first used]
)

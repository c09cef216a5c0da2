"""Constants read apart from the memory a call writes: a repair of Inductor's policy run before
the facts (``InductorPolicy.repairs_before``, Note [Pipeline] step 1 in ``reinplace.py``).

``rematerialize_constant_reads(graph)`` gives each reader of a constant that a call writes (a
``full``, ``zeros``, ``ones``, ``arange``: a value with no tensor input, or a pointwise value of
one alone) a copy of the constant of its own, made right before it, through the views it reads
it by. Reads the graph's order and node kinds; no Inductor configuration.
"""

from __future__ import annotations

import operator

import torch
from torch import fx
from torch.fx.node import map_arg

from ...hops.adapter import mutation_targets, read_node
from ...passes.copies import COPY_TARGETS
from ...passes.memory_ops import VIEW_OPS
from ...passes.walks import users_through_views
from .evaluation import extern_scan, lazy_kind
from .repairs import INPLACEABLE

__all__ = ["rematerialize_constant_reads"]

_aten = torch.ops.aten

# Values Inductor lowers as a computation of the index alone (no tensor read).
_CONSTANTS = frozenset(
    {
        _aten.full.default,
        _aten.zeros.default,
        _aten.ones.default,
        _aten.scalar_tensor.default,
        _aten.arange.default,
        _aten.arange.start,
        _aten.arange.start_step,
        torch.ops.prims.iota.default,
    }
)


def rematerialize_constant_reads(graph: fx.Graph) -> None:
    """Give every reader Inductor computes inline its own copy of a constant a call writes.

    Note [A constant read apart from the write]
    ``t = torch.ones(1); r = t.sum() * 3; op(x, t)`` writes ``t`` in place, and ``r`` reads the
    value ``t`` had before. Inductor may compute ``r`` late, after the op wrote ``t``, so the
    pass would compute ``r`` before the call into a buffer of its own, or clone ``t`` (fuzz
    seed 20261901 #62: 8 B over PyTorch's built-in, whose lowering happens to compute
    ``ones(1)`` inside the kernel of ``r``). A constant is a value of its index alone: a reader
    computes it as well as it reads it. So each reader that Inductor computes as a kernel of its
    own (a pointwise node or a reduction, which take a value not yet computed inline) and that
    is neither a view nor a write gets its own copy of the constant, made right before it: a
    node with one such user, which Inductor computes inside that user's kernel, with no memory
    of its own, and never the memory the call writes. Readers before the call and old values
    read after it alike then read nothing a call writes. A reader of a view of the constant
    (``torch.arange(2).view(2)``, a slice, a select: views Inductor computes by indexing, never
    ``as_strided`` or a dtype view, which take memory) gets the views again, on its own copy;
    and a pointwise value of a constant alone is a constant too (``torch.arange(4,
    dtype=torch.float64)`` is a ``convert_element_type`` of an ``iota``; fuzz seed 20261609
    #95: a 16-byte clone of it before), copied with the chain that makes it.
    Only constants some call writes (the constant or a view of it is a buffer of a functional
    mutation node) are copied, and only for readers that compute it inside a kernel: a reshape
    is a view to Inductor, and a copy of the constant for one that a call takes would be a
    buffer of its own (fuzz seed 20261902 #202, 192 B). The other users (the calls, extern
    kernels) keep the constant; so does a scan Inductor runs as an extern kernel (Note [Scans
    Inductor runs as extern kernels]) before every call that writes the constant, which reads
    it from memory where it stands: a copy of the constant for it would be a buffer of its own
    (fuzz seed 20261930 #250: ``t = zeros(3, 6); r = t[:, 1::3].cumsum(0); op(t[:, 1::3],
    ...)``, 144 B over PyTorch's built-in). One after such a call takes a copy: it reads the
    value before the call.
    """
    targets = mutation_targets()
    constants = [n for t in _CONSTANTS for n in graph.find_nodes(op="call_function", target=t)]
    for root in constants:
        if not _constant(root):
            continue
        for made in _computed_from(root):  # the constant, and pointwise values of it alone
            writers = _writers(made[-1], targets)
            if not writers:
                continue
            for chain, reader in _inline_readers(made[-1]):
                if extern_scan(reader) and all(w > reader for w in writers):
                    continue  # reads the memory where it stands, before any write (the Note)
                with graph.inserting_before(reader):
                    own = None
                    for n in [*made, *chain]:
                        own = _copy_node(graph, n, own)
                reader.replace_input_with(chain[-1] if chain else made[-1], own)


def _writers(node: fx.Node, targets: tuple) -> list[fx.Node]:
    """The functional mutation nodes that write ``node`` or a view of it (one read by no
    adapter counts as writing what it takes)."""
    users = users_through_views(node)
    mine = {node, *(u for u in users if u.op == "call_function" and u.target in VIEW_OPS)}
    out = []
    for user in users:
        if user.target in targets:
            m = read_node(user)
            if m is None or any(b in mine for b in m.buffers):
                out.append(user)
    return out


def _computed_from(root: fx.Node) -> list[list[fx.Node]]:
    """``[root]``, and ``[root, ..., v]`` for each value ``v`` computed from ``root`` alone by a
    chain of pointwise nodes of one tensor input (``arange(2, dtype=torch.float64)`` is a
    ``convert_element_type`` of an ``iota``): values of their index alone too."""
    out, todo = [], [[root]]
    while todo:
        made = todo.pop()
        out.append(made)
        for user in made[-1].users:
            if _pointwise_of(user, made[-1]):
                todo.append([*made, user])
    return out


def _pointwise_of(user: fx.Node, node: fx.Node) -> bool:
    """Whether ``user`` is a pointwise node whose only tensor input is ``node``, its first
    argument."""
    target = user.target
    return (
        user.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and torch.Tag.pointwise in target.tags
        and target not in COPY_TARGETS  # a copy stays one copy (the report counts them)
        and not target._schema.is_mutable
        and bool(user.args)
        and user.args[0] is node
        and all(
            a is node or not isinstance(a.meta.get("val"), torch.Tensor)
            for a in user.all_input_nodes
        )
    )


def _inline_readers(node: fx.Node) -> list[tuple[list[fx.Node], fx.Node]]:
    """``(views, reader)`` for each reader Inductor computes inline of ``node`` or of a chain of
    index views of it (``views``, from ``node`` on)."""
    out, todo = [], [(node, [])]
    while todo:
        src, chain = todo.pop()
        for user in src.users:
            if user.op == "call_function" and user.target in _INDEX_VIEWS and user.args[0] is src:
                todo.append((user, [*chain, user]))
            elif _computes_inline(user):
                out.append((chain, user))
    return out


def _copy_node(graph: fx.Graph, node: fx.Node, src: fx.Node | None) -> fx.Node:
    """``node`` made again at the insertion point, on ``src`` in place of its first input
    (``None``: the constant, with its own arguments), its fake value computed anew (a
    constant's over a storage of its own)."""
    args = node.args if src is None else (src, *node.args[1:])
    new = graph.call_function(node.target, args, dict(node.kwargs))
    new.meta.update(node.meta)
    new.meta["val"] = _fake_value(new)
    return new


# Views Inductor computes from a value not yet computed by indexing it (no memory read), one
# tensor each (not the pieces of a split or unbind).
_INDEX_VIEWS = (VIEW_OPS | {_aten.reshape.default}) - {
    _aten.as_strided.default,
    _aten.view.dtype,
    _aten.split.Tensor,
    _aten.split_with_sizes.default,
    _aten.unbind.int,
    operator.getitem,
}


def _constant(node: fx.Node) -> bool:
    """Whether ``node`` computes a tensor from no tensor (its inputs are sizes, if any)."""
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    return not any(isinstance(a.meta.get("val"), torch.Tensor) for a in node.all_input_nodes)


def _computes_inline(user: fx.Node) -> bool:
    """Whether Inductor computes ``user`` as a kernel of its own that computes a constant
    input inside it: a pointwise node or a reduction, neither a view, a write nor a scatter."""
    target = user.target
    return (
        user.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and lazy_kind(user)
        and target not in VIEW_OPS
        and target not in _INDEX_VIEWS  # a reshape: a view of a value not computed yet
        and target not in INPLACEABLE
        and not target._schema.is_mutable
    )


def _fake_value(node: fx.Node) -> torch.Tensor:
    """``node``'s fake value computed anew from its arguments' (a constant's over a storage of
    its own: the alias analysis names memory by fake storage)."""
    val = node.meta["val"]
    args = map_arg(node.args, lambda n: n.meta["val"])
    kwargs = map_arg(node.kwargs, lambda n: n.meta["val"])
    with val.fake_mode:
        return node.target(*args, **kwargs)

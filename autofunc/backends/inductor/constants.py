"""Constants read apart from the memory a call writes: a repair of Inductor's policy run before
the facts (``InductorPolicy.repairs_before``, Note [Pipeline] step 1 in ``reinplace.py``).

``rematerialize_constant_reads(graph)`` gives each reader of a constant that a call writes (a
``full``, ``zeros``, ``ones``, ``arange``: a value with no tensor input) a copy of the constant
of its own, made right before it. Reads the graph's order and node kinds; no Inductor
configuration.
"""

from __future__ import annotations

import torch
from torch import fx
from torch.fx.node import map_arg

from ...hops.adapter import mutation_targets
from ...passes.memory_ops import VIEW_OPS
from ...passes.walks import users_through_views
from .evaluation import lazy_kind
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
    read after it alike then read nothing a call writes. Only constants some call writes (the
    constant or a view of it is an argument of a functional mutation node) are copied; their
    other users (the calls, views, extern kernels) keep the constant itself.
    """
    targets = mutation_targets()
    constants = [n for t in _CONSTANTS for n in graph.find_nodes(op="call_function", target=t)]
    for node in constants:
        if not _constant(node):
            continue
        users = users_through_views(node)
        if not any(u.target in targets for u in users):
            continue
        for reader in [u for u in node.users if _computes_inline(u)]:
            with graph.inserting_before(reader):
                own = graph.call_function(node.target, node.args, dict(node.kwargs))
            own.meta.update(node.meta)
            own.meta["val"] = _fresh_value(node)
            reader.replace_input_with(node, own)


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
        and target not in INPLACEABLE
        and not target._schema.is_mutable
    )


def _fresh_value(node: fx.Node) -> torch.Tensor:
    """A fake value like ``node``'s over a storage of its own (the alias analysis names memory
    by fake storage)."""
    val = node.meta["val"]
    args = map_arg(node.args, lambda n: n.meta["val"])
    kwargs = map_arg(node.kwargs, lambda n: n.meta["val"])
    with val.fake_mode:
        return node.target(*args, **kwargs)

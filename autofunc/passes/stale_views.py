"""Views whose fake value lost its base's storage, given a value computed from their base before
the pass reads memory off fake storages (step 0 of Note [Pipeline] in reinplace.py).

``refresh_stale_views(graph)`` walks ``graph`` once, in order. For every view node (an op whose
schema says its output aliases its input, or one of ``alias.VIEW_OPS``) whose fake value does
not live in its base's fake storage, it computes the value again from the base's value, in the
base's fake mode (``emit.fake_value``, as for the pass's own views), and puts it in
``meta["val"]``; an element of a multi-output view (``getitem`` of a ``split``) follows its
tuple. It returns the nodes it could not recompute (an empty list in every graph seen); the
caller then writes nothing in place. Nothing else changes: no node is added, removed or
rewired.

Note [Views of a removed copy]
The pass knows which nodes share memory only from their fake values: two values in one fake
storage are one memory (``AliasAnalysis``), a value in a storage of its own is fresh memory.
That holds for a graph as traced, where a view's value is computed from its base's. A functional
graph may then have a node replaced by an equal value: Inductor's ``remove_noop_ops`` replaces a
``clone`` whose size, stride and dtype equal its source's by the source, before any post-grad
custom pass runs (Inductor refreshes fake values only after them). The clone's views keep the
values computed over the clone's fake storage, although at run time they view the source.
Functionally nothing changed; for the pass such a view was fresh memory, so a call writing it
looked free to write in place, and wrote the source. In a ``torch.cond`` branch under v1
(``buf = x.clone(); op(buf[0], ...); return buf``, the pattern of pytorch#147210) that wrote
the operand, a graph input, and the compiled program returned wrong values (no error).
So the pass first gives every such view the value its base gives it: the walk is in graph
order, so a view of a view compares with its base's new value. A stale value can also be
wrong in geometry, not only in storage: a clone has offset 0 where its source may not, and
views of the source are offset accordingly; the recomputed value has the source's geometry.
Ops that return an alias of a written argument (``copy_``) are left as they are: their values
are never a buffer the pass writes. Only views of fake values are recomputed; a view of a
constant held as a real tensor is left as it was.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from ..symbolic import known
from .memory_ops import VIEW_OPS, storage_address
from .emit import fake_value
from .targets import per_target
from ..logs import get_logger

__all__ = ["refresh_stale_views"]

log = get_logger("autofunc.passes.stale_views")


def refresh_stale_views(graph: fx.Graph) -> list[fx.Node]:
    """Recompute the fake value of every view in ``graph`` that does not live in its base's fake
    storage (module docstring); the nodes whose value could not be recomputed.

    It runs on every graph the pass sees and almost always finds nothing, so a view costs a
    memo read (``_is_view``'s, inline) and two storage addresses: a multi-output view is
    judged by its first element (all of them view one base), and an element (``getitem``) is
    looked at only where its tuple was recomputed.
    """
    failed: list[fx.Node] = []
    refreshed: set[fx.Node] = set()
    memo, is_view, getitem = _is_view.memo, _is_view, operator.getitem
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        known = memo.get(id(target))
        if not (known[1] if known is not None else is_view(target)):
            continue
        args = node.args
        base = args[0] if args else None
        if type(base) is not fx.Node:
            continue
        if target is getitem:
            if base in refreshed and len(args) > 1 and type(args[1]) is int:
                node.meta["val"] = base.meta["val"][args[1]]
            continue
        base_val, val = base.meta.get("val"), node.meta.get("val")
        if type(base_val) is not FakeTensor:
            continue  # a real constant, a value of no tensor: not the pass's to recompute
        first = val[0] if isinstance(val, (tuple, list)) and val else val
        if type(first) is not FakeTensor:
            continue
        if storage_address(first) == storage_address(base_val):
            continue
        try:
            new = fake_value(base_val.fake_mode, target, args, node.kwargs)
        except Exception:  # noqa: BLE001 - any failure: the caller writes nothing in place
            log.debug("%s: no fake value from its base", node.name, exc_info=True)
            failed.append(node)
            continue
        if not _same_shapes(new, val):
            failed.append(node)
            continue
        log.debug("%s: fake value recomputed from its base %s", node.name, base.name)
        node.meta["val"] = new
        refreshed.add(node)
    return failed


@per_target  # Note [Facts per target]
def _is_view(target: Any) -> bool:
    if target in VIEW_OPS:
        return True  # getitem among them: an element of a split's tuple
    return isinstance(target, torch._ops.OpOverload) and target.is_view


def _same_shapes(new: Any, old: Any) -> bool:
    """Whether ``new`` has ``old``'s structure, shapes and dtypes (provably, without a guard)."""
    if isinstance(old, torch.Tensor):
        return (
            isinstance(new, torch.Tensor)
            and new.dtype == old.dtype
            and new.dim() == old.dim()
            and all(known(a == b) for a, b in zip(new.shape, old.shape))
        )
    if isinstance(old, (tuple, list)):
        return (
            isinstance(new, (tuple, list))
            and len(new) == len(old)
            and all(_same_shapes(n, o) for n, o in zip(new, old))
        )
    return True

"""Merge identical views of graph inputs, so that Inductor lowers each view once.

``share_input_views(graph)`` replaces every ``select`` / ``slice`` node whose input is a graph
input (or such a view of one, merged first) and whose other arguments are plain ints by the
first node of the graph with the same target and arguments, erases it, and returns how many it
erased. It leaves the graph as it is (and returns 0) when any node may change a tensor's
size, stride or offset in place (Note [Views are values of their input's geometry]).

A decoder layer reads its KV cache as ``kv[l, 0]`` and ``kv[l, 1]`` in several places: where the
re-inplace pass regenerates the arguments of a cache write, and again where the user's code
passes the cache to attention. Inductor lowers every such node separately, and lowering a
``select`` costs about a millisecond of compile time (it is a ``squeeze`` of a ``slice``), so
a 128-layer decoder spends seconds on copies of one view.

Note [Views are values of their input's geometry]
A view node makes a new tensor object over its input's memory, with a size, stride and offset
computed from its input's size, stride and offset and its own arguments alone. It copies no
data: whoever uses the view reads the memory when it runs, so a write between two identical
view nodes is seen through either. The two are therefore interchangeable everywhere, provided
the input's geometry is the same at both, which in an FX graph (straight-line code) fails only
if a node between them changes it in place (``transpose_``, ``as_strided_``, ``resize_``,
``set_``: the ops with ``Tag.inplace_view`` and the resizing/re-seating ones). Custom ops and
HOPs may only write data. The first of two equal nodes comes first in the graph, so it is
defined wherever the second is used. Only views rooted at graph inputs are merged: a view of a
buffer Inductor computes may be realized separately (Note [Views of unrealized buffers under
Inductor] in reinplace.py). And eager hands each argument of a call its own tensor object,
which the graph keeps (Note [Arguments keep their identity] in hops/common.py): two equal
views taken by one node (a call, or the output) stay two nodes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

__all__ = ["share_input_views"]

_aten = torch.ops.aten
_SHARED = frozenset({_aten.select.int, _aten.slice.Tensor})


def _packets(*names: str) -> frozenset:
    """The op packets ``namespace.op`` of this torch that exist (some are recent)."""
    found = []
    for name in names:
        namespace, op = name.split(".")
        try:
            found.append(getattr(getattr(torch.ops, namespace), op))
        except (AttributeError, RuntimeError):
            continue
    return frozenset(found)


# Ops that change a tensor's geometry or storage in place without Tag.inplace_view.
_RESEATING = _packets(
    "aten.resize_",
    "aten.resize_as_",
    "aten._resize_output_",
    "aten.set_",
    "aten.as_strided_",
    "inductor.resize_storage_bytes_",
    "fsdp.set_",
)


def share_input_views(graph: fx.Graph) -> int:
    """Merge the equal views of graph inputs in ``graph`` (module docstring); the number of
    nodes erased."""
    if _changes_geometry_in_place(graph):
        return 0
    rooted: set[fx.Node] = set(graph.find_nodes(op="placeholder"))
    first: dict[tuple, fx.Node] = {}
    erased = 0
    # the views alone, in graph order (a slice of a select is rooted once the select is)
    for node in sorted(n for t in _SHARED for n in graph.find_nodes(op="call_function", target=t)):
        if node.kwargs:
            continue
        base, rest = node.args[0], node.args[1:]
        if base not in rooted or not all(type(a) is int or a is None for a in rest):
            continue
        key = (node.target, base, rest)
        earlier = first.get(key)
        if earlier is None:
            first[key] = node
            rooted.add(node)
            continue
        if any(earlier in user.all_input_nodes for user in node.users):
            rooted.add(node)  # one call (or the output) would get one object twice
            continue
        node.replace_all_uses_with(earlier)
        graph.erase_node(node)
        erased += 1
    return erased


def _changes_geometry_in_place(graph: fx.Graph) -> bool:
    targets = {id(n.target): n.target for n in graph.nodes if n.op == "call_function"}
    return any(_reseats(t) for t in targets.values())  # each distinct target once


def _reseats(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return torch.Tag.inplace_view in target.tags or target.overloadpacket in _RESEATING

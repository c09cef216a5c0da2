"""The walks over a graph that several steps of the re-inplace pass share, each written once:
down a chain of views to its root (:func:`view_walk`, :func:`view_root`), up to every user
through views (:func:`users_through_views`), the ``copy_`` nodes, those that write a value
back into a graph input apart (:func:`copy_calls`, :func:`input_copies`), and what a node
passes for the arguments its schema marks written (:func:`written_arguments`). Pure queries;
nothing here rewrites the graph.
Imports only ``alias`` (for ``VIEW_OPS``), so every step may import it.
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from typing import Any

import torch
from torch import fx

from .memory_ops import VIEW_OPS

__all__ = [
    "copy_calls",
    "input_copies",
    "users_through_views",
    "view_root",
    "view_walk",
    "written_arguments",
]

_aten = torch.ops.aten


def view_walk(node: Any, through: Container[Any] = VIEW_OPS) -> Iterator[fx.Node]:
    """``node``, the node it is a view of, that node's input, ... down to the root, root last.

    The walk steps from a node to its first argument while the node is a ``call_function`` of
    a target in ``through`` whose first argument is a node; the first node it cannot step
    from is the root and ends it. A value that is no node yields nothing.

    ``through`` says which ops count as views, where a walk stops earlier or goes further than
    ``VIEW_OPS``: the views keeping a dtype (``VIEW_OPS`` less ``view.dtype``), the views
    keeping the bytes (``view.dtype``, ``alias``, ``detach``), or views and the scatters
    Inductor may re-inplace into their first input. A walk that stops at a node for what it
    *holds* (a pinned view, a tag) reads that off the nodes it yields.

    Args:
        node: where the walk starts; yielded first when it is a node.
        through: the targets the walk steps through (default ``VIEW_OPS``).

    Returns:
        An iterator over ``node`` and each node below it, in walk order.
    """
    while isinstance(node, fx.Node):
        yield node
        if not (
            node.op == "call_function"
            and node.target in through
            and node.args
            and isinstance(node.args[0], fx.Node)
        ):
            return
        node = node.args[0]


def view_root(node: Any, through: Container[Any] = VIEW_OPS) -> Any:
    """The node a chain of views ``through`` starts from: the last node of :func:`view_walk`;
    ``node`` itself where it is no such view (or no node)."""
    root = node
    for root in view_walk(node, through):
        pass
    return root


def users_through_views(node: fx.Node, through: Container[Any] = VIEW_OPS) -> list[fx.Node]:
    """The nodes that use ``node`` or a chain of views ``through`` of it (the views themselves
    included), each once."""
    out, todo, seen = [], [node], {node}
    while todo:
        for user in todo.pop().users:
            if user in seen:
                continue
            seen.add(user)
            out.append(user)
            if user.op == "call_function" and user.target in through:
                todo.append(user)
    return out


def copy_calls(graph: fx.Graph) -> list[fx.Node]:
    """Every ``copy_(dst, src)`` node of ``graph``, in graph order."""
    return graph.find_nodes(op="call_function", target=_aten.copy_.default)


def input_copies(graph: fx.Graph) -> dict[fx.Node, list[fx.Node]]:
    """Each graph input that a ``copy_`` writes -> those ``copy_(input, value)`` nodes, in graph
    order: the last one is the epilogue copy-back of the input's final value (AOTAutograd's),
    the first the earliest write of the input the graph makes that way."""
    out: dict[fx.Node, list[fx.Node]] = {}
    for n in copy_calls(graph):
        dst = n.args[0]
        if isinstance(dst, fx.Node) and dst.op == "placeholder":
            out.setdefault(dst, []).append(n)
    return out


def written_arguments(node: fx.Node) -> list[Any]:
    """What ``node`` passes for each argument its op's schema marks written (each element of
    a written list), in schema order: none for a node that calls no ``OpOverload``, or one
    whose schema writes nothing."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return []
    schema, out = target._schema, []
    if not schema.is_mutable:
        return out
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        out.extend(value if isinstance(value, (list, tuple)) else (value,))
    return out

"""Lazy reads computed before a call instead of a clone of the buffer (Inductor only).

Note [Lazy reads computed before the call]
Inductor computes a pointwise node (or a small reduction) where its value is first needed, so
a value read from a buffer before a call and used after it may be computed after the call
wrote the buffer in place. Inductor's own guard does not cover an opaque op: lowering the op's
mutation realizes the pending readers of the buffer (``GraphLowering.mark_buffer_mutated``),
but only after the op's kernel is registered, and registration order is scheduling order, so
they land after the write. Rule R9 therefore cloned the buffer (``Reason.LAZY_READ``).

A cheaper repair makes Inductor compute those values before the call. The *frontier* is what
must exist before the call: starting from the readers of the written elements, the lazy nodes
before the call that they feed, kept where one of their users is at or after the call (the
output included). For each frontier node ``f``::

    e = empty_like(f); c = copy_(e, f)      # just before the call
    ... uses of f after the call read c ...

Inductor lowers ``copy_`` into a buffer it allocated by computing ``f`` into a buffer of its
own right there and renaming it (``mutate_to``'s fast path: no copy, no second allocation), and
orders the call's write after that read (a write after read of a realized buffer). Uses before
the call keep ``f`` and read that same buffer.

It pays when the frontier is smaller than the buffer: a frontier node the graph returns costs
nothing (Inductor computes it into the output buffer anyway), any other its size. The rule
picks the repair only when it costs strictly less than the clone; otherwise the clone stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import torch
from torch import fx

from .emit import emit
from .facts import _nbytes

_aten = torch.ops.aten

__all__ = ["Realization", "plan_realization", "realize_before"]


class Realization(NamedTuple):
    """The lazy values to compute before a call, and what that costs in bytes."""

    nodes: tuple[fx.Node, ...]
    nbytes: int


def plan_realization(
    call: fx.Node, readers: Iterable[fx.Node], outputs: Iterable[fx.Node], is_lazy: Any
) -> Realization | None:
    """The frontier of ``readers`` at ``call`` (see the Note): the lazy nodes before ``call``
    reachable from the readers through lazy users, that have a user at or after ``call``;
    ``None`` when one of them is no tensor (a tuple: its elements are what is used)."""
    frontier: dict[fx.Node, None] = {}
    seen, todo = set(readers), list(readers)
    while todo:
        n = todo.pop()
        for u in n.users:
            if u is call:
                continue  # the call realizes what it takes before it runs
            if u > call or u.op == "output":
                frontier[n] = None
            elif is_lazy(u) and u not in seen:
                seen.add(u)
                todo.append(u)
    if not all(isinstance(n.meta.get("val"), torch.Tensor) for n in frontier):
        return None
    returned = set(outputs)
    cost = sum(_nbytes(n.meta["val"]) for n in frontier if n not in returned)
    return Realization(tuple(sorted(frontier)), cost)


def realize_before(ctx: Any, call: fx.Node, plan: Realization) -> None:
    """Compute each node of ``plan`` just before ``call`` and make its later users read that."""
    graph, analysis = ctx.gm.graph, ctx.analysis
    for f in plan.nodes:
        later = [u for u in f.users if u is not call and (u.op == "output" or u > call)]
        with graph.inserting_before(call):
            empty = emit(ctx, _aten.empty_like.default, (f,))
            copied = emit(ctx, _aten.copy_.default, (empty, f))
        if f in analysis.version:
            analysis.track(copied, f)  # the buffer Inductor computes f into
            analysis.position[copied] = analysis.position[call]
        for u in later:
            u.replace_input_with(f, copied)

"""Views of a value that a later extern kernel takes whole, handed to an earlier one as views of
the value's buffer: a repair of Inductor's policy run after the rewrite
(``InductorPolicy.repairs_after``, Note [Pipeline] step 5 in ``reinplace.py``).

``views_of_values_taken_later(ctx)`` pins such a value where the first call takes a view of it.
Reads the graph's order, node kinds and fake values.

Note [A view of a value a later call takes whole]
Inductor computes the tensors an extern kernel takes where it lowers the kernel: a value not
computed yet, into a buffer of its own, and a view of such a value into a buffer of the view's
own (the view is then a value of its own). ``t = b * 1; mret(x, t.unsqueeze(3)); m3way(t, o,
c)`` therefore computes ``t`` twice, once as the view for ``mret`` and once for ``m3way``, and
both buffers are allocated (fuzz seed 20261937 #65: 768 B over PyTorch's built-in, whose graph
happens to have ``t`` computed first). Where a later extern kernel takes the value itself
anyway, the repair pins the value (``emit.pin_layout``) just before the first kernel that takes
a view of it and gives that kernel the same views of the pin: Inductor computes the value there,
into the buffer the later kernel takes, and hands the first kernel views of it. Sound: the value
is pure and its place comes before the first kernel, so computing it there gives the values its
place gives; the views of the pin are the views of the value (relative views only, Note [Storage
offsets] in ``passes/emit.py``); and a value the pass pins (``evaluation.pinnable_root``) keeps
the layout the graph records, which the later kernel gets either way.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from ...passes.emit import emit, pin_layout
from ...passes.memory_ops import SHIFTABLE_VIEWS
from ...passes.walks import view_walk
from .evaluation import lazy_under_inductor, pinnable_root
from .ops import extern_kernel

__all__ = ["views_of_values_taken_later"]


def views_of_values_taken_later(ctx: Any) -> None:
    """Note [A view of a value a later call takes whole]."""
    graph = ctx.gm.graph
    externs = [n for n in graph.nodes if extern_kernel(n)]
    whole: dict[fx.Node, fx.Node] = {}  # value -> the last extern kernel taking it itself
    for e in externs:
        for a in e.all_input_nodes:
            whole[a] = e
    for e in externs:
        pins: dict[fx.Node, fx.Node] = {}
        for a in list(e.all_input_nodes):
            chain = list(view_walk(a, SHIFTABLE_VIEWS))
            root = chain.pop()
            if not chain or not (root in whole and whole[root] > e) or not _pinnable(root):
                continue
            if root not in pins:
                with graph.inserting_before(e):
                    pins[root] = pin_layout(ctx, root)
            view = pins[root]
            with graph.inserting_before(e):
                for v in reversed(chain):  # the views again, on the pin
                    view = emit(ctx, v.target, (view, *v.args[1:]), dict(v.kwargs))
            e.replace_input_with(a, view)


def _pinnable(root: fx.Node) -> bool:
    """A value Inductor computes where it is first needed, which a pin lays out as recorded."""
    return (
        root.op == "call_function"
        and not root.meta.get("autofunc.pin")
        and lazy_under_inductor(root)
        and pinnable_root(root)
    )

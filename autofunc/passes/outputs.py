"""Step 4 of the re-inplace pass (Note [Pipeline] in ``reinplace.py``), after every call was
rewritten: what the graph returns and saves.

A buffer written in place may be a graph input's memory: a fresh output that now lives there
is copied at the end (Note [Returned values of written inputs]), a saved one is kept from the
backward's reuse (Note [Saved values of written inputs]), and an epilogue copy-back that became
``copy_(x, x)`` is removed.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from .emit import emit_clone
from .context import Pass
from .facts import flat_outputs
from .walks import copy_calls

__all__ = ["copy_returned_inputs", "keep_saved_inputs", "remove_self_copies"]


def _in_written_input(ctx: Pass, value: Any) -> bool:
    """Whether ``value`` now lives in the memory of a graph input some call wrote in place."""
    return (
        isinstance(value, fx.Node)
        and value in ctx.analysis.version
        and any(ctx.analysis.same_memory(value, i) for i in ctx.written_inputs)
    )


def copy_returned_inputs(ctx: Pass) -> None:
    """Return a copy of each fresh output that now lives in a graph input's memory because a
    call wrote that input in place (Note [Returned values of written inputs]); the copy is made
    at the end of the graph, where the input holds the value the output denotes."""
    if not ctx.written_inputs:
        return
    graph = ctx.gm.graph
    out = graph.output_node()
    clones: dict[fx.Node, fx.Node] = {}
    # regenerated outputs are the input's in eager too; saved ones are kept out of the
    # backward's reuse instead (Note [Saved values of written inputs])
    keep = set(ctx.regenerated) | set(ctx.saved.positions if ctx.saved is not None else ())

    def separate(i: int, arg: Any) -> Any:
        if i in keep or not _in_written_input(ctx, arg):
            return arg
        if arg not in clones:
            with graph.inserting_before(out):
                clones[arg] = emit_clone(ctx, arg, kind=ctx.policy.copy(ctx, arg))
        return clones[arg]

    flat = flat_outputs(out)
    if flat is not None:
        out.args = (type(flat)(separate(i, a) for i, a in enumerate(flat)),)
    else:
        out.args = fx.node.map_arg(out.args, lambda a: separate(-1, a))


def keep_saved_inputs(ctx: Pass) -> None:
    """Keep the backward from reusing the memory of a saved tensor that a call wrote into a
    graph input in place (Note [Saved values of written inputs])."""
    saved = ctx.saved
    if saved is None or not ctx.written_inputs:
        return
    flat = flat_outputs(ctx.gm.graph.output_node())
    drop = {saved.donated_index(p) for p in saved.positions if _in_written_input(ctx, flat[p])}
    if drop:
        saved.donated[:] = [i for i in saved.donated if i not in drop]


def remove_self_copies(graph: fx.Graph) -> None:
    """``copy_(x, x)`` is what an epilogue copy-back becomes once its buffer is written in place."""
    for n in copy_calls(graph):
        if n.args[0] is n.args[1]:
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)

"""Scatters into views of graph inputs written in place: a repair of Inductor's policy run
after the rewrite (``InductorPolicy.repairs_after``, Note [Pipeline] step 5 in
``reinplace.py``).

``scatters_into_inputs(ctx)`` finds the graph's copy into an input, at the end, of a scatter
into a view of that input read back in the input's geometry, and writes the scattered value
into the view where the scatter stands; the scatter's readers read the input. Reads the
graph's order, node kinds and fake values.
"""

from __future__ import annotations

import torch
from torch import fx

from ...passes.copies import CopyKind, copy_tag, set_copy_tag
from ...passes.emit import emit
from ...passes.memory_ops import SCATTER_VIEWS
from ...passes.walks import input_copies, users_through_views, written_arguments
from .copy_backs import in_memory_of, read_after, shares_memory_with_another
from .repairs import INPLACEABLE
from .input_buffers import (
    ALIASES,
    LAYOUT_FREE,
    VIEW_ATEN,
    erase_unused,
    one_layout,
    regenerated_only,
)

__all__ = ["scatters_into_inputs"]

_aten = torch.ops.aten

# Scatter -> the view it writes: those whose view addresses its input's memory the way the
# scatter's result addresses its own (``as_strided_scatter`` takes absolute offsets).
_SCATTERS = {t: v for t, v in SCATTER_VIEWS.items() if t != _aten.as_strided_scatter.default}


def scatters_into_inputs(ctx) -> None:
    """Where the graph copies into the input ``x``, at the end, a scatter into a view of ``x``
    read back into ``x``'s geometry, write the scattered value into that view of ``x`` where the
    scatter stands instead.

    Note [A scatter into an input written in place]
    ``a.unsqueeze(0).diagonal(1, 1, 3).mul_(0.5)`` after a call that writes ``a`` in place
    (fuzz seed 20261925 #69, on a strided ``a``) reaches Inductor as ``s = diagonal_scatter(
    a.unsqueeze(0), m, 1, 1, 3); copy_(a, s.squeeze(0))``. Inductor re-inplaces a scatter into
    a view of a graph input only where the scatter's recorded layout is the view's, and ``s``'s
    is dense where ``a`` is strided: it computes ``s`` into a buffer of its own and copies it
    into ``a`` (480 B over PyTorch's built-in, whose scatter reads the call's functional value,
    which Inductor re-inplaces). Eager writes ``m`` into ``a``'s diagonal, and so does
    ``copy_(a.unsqueeze(0).diagonal(1, 1, 3), m)`` where the scatter stood.

    Sound where the copy's source is the scatter read back through views that undo the views
    taking ``x`` to the scatter's input (``_undone``: the two chains, run on ``x``'s fake value,
    give ``x``'s geometry), nothing but the next of that chain uses one of its nodes but
    readers of the scatter or of the last view (``_use_instead``: nodes that write none of
    it, through views the caller gets no memory of, outputs AOTAutograd regenerates from
    ``x`` among them), which take the scatter's input, or ``x`` for the last view, holding
    the same values once the scatter is written, and, after the scatter, nothing else uses a
    value that may be ``x``'s memory and no read of ``x``'s old memory is pending: ``x`` then
    holds, outside the view, what the scatter read there, and inside it the scattered value,
    from the scatter's place to the end, as the copy would have left it, and each reader
    reads there what it read before. Fuzz seed 20261930 #66, ``v = a.unsqueeze(0)[:, :,
    2:3]; v.mul_(0.5); m2(r, r, v)`` on an offset ``a``, the call reading the new value
    (480 B over the built-in while only copies and outputs could take the scatter). A scatter
    whose value is a scatter into the same view (``kv[1, 0]`` written through ``kv[1]``) is
    one write of the innermost value. A scatter into ``x`` itself is left as it is: Inductor
    writes it into ``x`` where it stands.
    """
    graph = ctx.gm.graph
    inputs, returned = graph.find_nodes(op="placeholder"), set(ctx.outputs)
    for dst, copies in input_copies(graph).items():
        copy = copies[-1]
        chain = _read_back(copy, returned) if len(copies) == 1 else None
        if chain is None or shares_memory_with_another(dst, inputs):
            continue
        scatter, gone = chain[0], set(chain)
        # a scatter into the input itself Inductor re-inplaces as it stands (so does it a
        # scatter of a scatter into it: ``kv[1, 0].mul_(2)``)
        if scatter.args[0] is dst or not _undone(dst, scatter.args[0], chain[1:]):
            continue
        # views only outputs AOTAutograd regenerates take read nothing; the chain's views
        # will take the input's new value (``_use_instead``)
        readers = {u for n in (chain[0], chain[-1]) for u in users_through_views(n, ALIASES)}
        memory = {
            n
            for n in in_memory_of(dst) - gone - readers - {copy}
            if not regenerated_only(n, returned)
        }
        if any(n > scatter for n in memory) or read_after(memory, scatter, copy, returned):
            continue
        view, value, anchor = scatter.args[0], scatter, scatter
        while True:  # a scatter of a scatter into the same view: one write, the innermost's
            with graph.inserting_after(anchor):
                # a scatter's arguments after its source are its view's, by the same names
                view = emit(
                    ctx, _SCATTERS[value.target], (view, *value.args[2:]), dict(value.kwargs)
                )
            anchor, value = view, value.args[1]
            if not _scatter_into(value, view):
                break
            gone.add(value)
        with graph.inserting_after(anchor):
            write = emit(ctx, _aten.copy_.default, (view, value))
        set_copy_tag(write, copy_tag(copy) or (CopyKind.OTHER, ""))  # the copy it replaces
        # its readers (outputs AOTAutograd regenerates among them): of what is written in place
        for n in {chain[0], chain[-1]}:
            n.replace_all_uses_with(_instead(chain, n, copy), lambda u: u not in gone | {copy})
        graph.erase_node(copy)
        erase_unused(chain[-1])


def _read_back(copy: fx.Node, returned: set[fx.Node]) -> list[fx.Node] | None:
    """``[scatter, *views]``: the scatter the copy's source reads through a chain of views,
    each used by the next (the last by the copy) and otherwise, the scatter and the last
    view alone, only by nodes that may take what holds their values once the scatter is
    written (``_use_instead``); or ``None``."""
    chain: list[fx.Node] = []
    node = copy.args[1]
    while isinstance(node, fx.Node) and node.target in VIEW_ATEN:
        chain.append(node)
        node = node.args[0]
    if not isinstance(node, fx.Node) or node.target not in _SCATTERS:
        return None
    chain.append(node)
    chain.reverse()
    for n, user in zip(chain, (*chain[1:], copy)):
        others = [u for u in n.users if u is not user]
        instead = _instead(chain, n, copy)
        if others and (
            instead is None or not all(_use_instead(u, n, instead, returned) for u in others)
        ):
            return None
    return chain


def _instead(chain: list[fx.Node], node: fx.Node, copy: fx.Node) -> fx.Node | None:
    """What holds ``node``'s values once the scatter is written in place: the scatter's input
    for the scatter, the input for the chain's last view (the input's geometry, ``_undone``)."""
    if node is chain[-1]:
        return copy.args[0]
    return node.args[0] if node is chain[0] else None


def _use_instead(user: fx.Node, node: fx.Node, instead: fx.Node, returned: set[fx.Node]) -> bool:
    """Whether ``user`` may take ``instead`` in ``node``'s place: it and the nodes it reaches
    through views read ``node``'s values and write none of them, the caller gets the memory of
    none of those views (an output AOTAutograd regenerates from the input is the input's
    anyway), and the views pick the same elements of either: any where the two have one
    geometry, else those that do whatever the strides."""
    if user.op == "output":
        return node not in returned
    uses = (user, *users_through_views(user, ALIASES)) if user.target in ALIASES else (user,)
    views = {u for u in uses if u.op == "call_function" and u.target in ALIASES}
    sources = views | {node}
    if any(v in returned for v in views) or not all(
        u.op == "output" or _reads_only(u, sources) for u in uses if u not in views
    ):
        return False
    if one_layout(instead.meta.get("val"), node.meta.get("val")):
        return True
    free = LAYOUT_FREE | {_aten.unfold.default, _aten.expand.default}
    return all(v.target in free for v in views)


def _reads_only(user: fx.Node, sources: set[fx.Node]) -> bool:
    """Whether ``user`` is an ATen or custom op that writes none of ``sources`` it takes and
    returns none of their memory: not a scatter Inductor may write into its input, no result
    its schema lets alias an argument (a ``reshape``, whose users would take the input's
    memory unseen), and no argument its schema marks written holds one."""
    target = user.target
    if not isinstance(target, torch._ops.OpOverload) or target in INPLACEABLE:
        return False
    schema = target._schema
    if any(r.alias_info is not None for r in schema.returns):
        return False
    return not any(v in sources for v in written_arguments(user))


def _scatter_into(value: object, view: fx.Node) -> bool:
    """Whether ``value`` is a scatter, used only by the scatter it is scattered into, into a
    view that takes the same elements of the same node as ``view`` (and used by it alone)."""
    if not isinstance(value, fx.Node) or value.target not in _SCATTERS or len(value.users) != 1:
        return False
    base = value.args[0]
    return (
        isinstance(base, fx.Node)
        and len(base.users) == 1
        and base.target == view.target
        and base.args == view.args
        and base.kwargs == view.kwargs
    )


def _undone(dst: fx.Node, base: object, back: list[fx.Node]) -> bool:
    """Whether ``base`` is a chain of views of ``dst`` that the views ``back`` undo: run on
    ``dst``'s fake value, the two chains give ``dst``'s geometry (only constant arguments)."""
    forward: list[fx.Node] = []
    node = base
    while node is not dst:
        if not isinstance(node, fx.Node) or node.target not in VIEW_ATEN:
            return False
        forward.append(node)
        node = node.args[0]
    val = dst.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    out = val
    for n in (*reversed(forward), *back):
        if any(isinstance(a, fx.Node) for a in (*n.args[1:], *n.kwargs.values())):
            return False
        try:
            out = n.target(out, *n.args[1:], **n.kwargs)
        except Exception:  # noqa: BLE001 - a view the fake value does not take: not undone
            return False
    return one_layout(out, val)

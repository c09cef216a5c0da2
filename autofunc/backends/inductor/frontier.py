"""Cheaper shapes of a frontier (Note [Lazy reads computed before the call] in lazy_reads.py,
the only importer): the lazy values a plan computes before a call, replaced by the views of
them its later users read (:func:`views_instead`), or by the inputs they read the written
buffer through, copied where they stand (:func:`cut_at_inputs`), or computed through a pin of
the root the call takes anyway (:func:`pins_where_taken`). Each returns what it chose;
nothing here touches the graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from ...hops.adapter import read_node
from ...passes.memory_ops import VIEW_OPS
from ...symbolic import nbytes_hint
from .evaluation import storage_root

__all__ = ["cut_at_inputs", "pins_where_taken", "views_instead"]


def cut_at_inputs(
    frontier: dict[fx.Node, None],
    seen: set,
    readers: set,
    call: fx.Node,
    early: set,
    here: Any,
    free: set,
) -> tuple[fx.Node, ...]:
    """Replace in ``frontier`` each node that costs more than the inputs it reads the buffer
    through by those inputs, copied where they stand; returns them.

    Note [A frontier cut at its inputs]
    ``r = b[1:2].sum() * 3; a.add_(r); op(b); return r``: the frontier is ``a + r``, as large
    as ``a`` (the graph copies it into ``a`` after the call), and ``r``, returned. Computing
    ``a + r`` before the call costs more than a clone of ``b``, which the call kept (fuzz seed
    20261804 #171: 40 B over PyTorch's built-in). But ``a + r`` reads ``b`` only through ``r``:
    ``r`` copied where it stands (``c = copy_(empty_like(r), r)`` right after it, every user
    of ``r`` reading ``c``) is computed there, before the call, into a buffer of its own, and
    ``a + r`` then reads that buffer wherever Inductor computes it. The copy costs ``r``'s size,
    nothing where ``r`` is free (returned: the copy is what the graph returns). Only computed
    values (no view, nothing the call takes or writes) are cut this way, and only where it costs
    less than the node they replace; never a node that reads the buffer itself (``readers``:
    fuzz seed 20261904 #244, ``(b + r1).sum()`` with ``r1`` read from ``b`` was cut at ``r1``,
    and the sum read ``b`` after the call wrote it)."""
    def cost(n: fx.Node) -> int:
        return 0 if n in free else nbytes_hint(n.meta["val"])

    cut: dict[fx.Node, None] = {}
    for f in list(frontier):
        if f in free or f in readers:
            continue
        inputs = [a for a in f.all_input_nodes if a in seen]
        if not inputs or not all(_copied_in_place(a, call, early, here) for a in inputs):
            continue
        if sum(cost(a) for a in inputs if a not in frontier) >= cost(f):
            continue
        del frontier[f]
        for a in inputs:
            frontier[a] = None
            cut[a] = None
    return tuple(sorted(cut))


def _copied_in_place(a: fx.Node, call: fx.Node, early: set, here: Any) -> bool:
    """Whether ``a`` may be copied where it stands (Note [A frontier cut at its inputs])."""
    return (
        a.op == "call_function"
        and a.target not in VIEW_OPS
        and isinstance(a.meta.get("val"), torch.Tensor)
        and (a < call or a in early)
        and call not in a.users
        and not here(a)
        and not a.meta.get("autofunc.pin")
    )


def views_instead(
    frontier: dict[fx.Node, None],
    call: fx.Node,
    early: set,
    here: Any,
    returned: set,
    keep: set = frozenset(),
) -> list[fx.Node]:
    """Replace in ``frontier`` each node that is used after ``call`` only through views of it
    by those views, where they are smaller; returns the views, to move before the call.

    Note [Views computed instead of their base]
    A frontier node ``f`` that only views of it (``f[0]``, ``f[:, 1:3]``) use after the call
    need not be computed whole before it: each such view, moved to just before the call (its
    base and every other input exist there, and a view computes nothing), is computed into a
    buffer of its own instead, and its later users read that. ``h = x * 2; s = op(h);
    op2(x); return h[:, 1:3] + 1, s``: 48 bytes of ``h``'s two columns instead of a copy of
    ``x`` (PyTorch's built-in writes ``x`` in place with nothing computed first, and returns
    columns of the new ``x`` doubled). Only where the views cost less than ``f`` (a view the
    graph returns costs nothing, as ``f`` would not), and never for a returned ``f`` or one to
    ``keep``.
    """
    views_of: dict[fx.Node, list[fx.Node]] = {}
    for f in frontier:
        if f in returned or f in keep:
            continue
        later = []
        for u in f.users:
            if here(u) or u is call:
                continue
            if u.op == "output":
                break
            if u > call and u not in early:
                later.append(u)
        else:
            if later and all(_view_movable_before(v, f, call, early) for v in later):
                cost = sum(nbytes_hint(v.meta["val"]) for v in later if v not in returned)
                if cost < nbytes_hint(f.meta["val"]):
                    views_of[f] = later
    moved: list[fx.Node] = []
    for f, later in views_of.items():
        del frontier[f]
        for v in later:
            frontier[v] = None
            moved.append(v)
    return moved


def _view_movable_before(v: fx.Node, base: fx.Node, call: fx.Node, early: set) -> bool:
    """Whether ``v`` is a single-tensor view of ``base`` whose other inputs all exist before
    ``call``."""
    return (
        v.op == "call_function"
        and v.target in VIEW_OPS
        and v.args
        and v.args[0] is base
        and isinstance(v.meta.get("val"), torch.Tensor)
        and all(a is base or a < call or a in early for a in v.all_input_nodes)
    )


def pins_where_taken(
    frontier: dict[fx.Node, None], call: fx.Node, skip: set, returned: set, pinnable: Any
) -> tuple[dict[fx.Node, fx.Node], int]:
    """The frontier nodes (not in ``skip``) to compute through a pin of their storage root
    where ``call`` reads that root itself or a view of it, each with its root; and what the
    pinned roots cost (the bytes they keep alive past the call; nothing for one ``returned``).

    Note [A value the call takes, pinned for its later readers]
    ``r = b.sum(0) * 3; v = r.unsqueeze(1); op(b, b, v); return v.cumsum(2)``: ``v`` is read
    after the call that writes ``b``, so it is a frontier node, and the plain plan copied it
    (``c = copy_(empty_like(v), v)`` before the call). But the call reads ``v`` itself, so
    ``r`` is computed before the call anyway: the copy was a second buffer beside ``r``'s,
    240 B over PyTorch's built-in, which reads ``v``'s later users from ``r``'s buffer (fuzz
    seed 20261911 #273; #50 likewise with ``r`` taken whole and an ``as_strided`` of it
    returned, 32 B). A copy is needed at all only because the op is given its arguments with
    eager's strides: where ``r`` is not computed yet when Inductor lowers the call, it copies
    the view for the op and leaves ``r`` lazy, so a later reader of ``v`` would compute ``r``
    from the memory the call wrote. A pin of ``r`` (``pin_layout``: an ``as_strided`` alias
    with its own geometry, just before the call; Note [A pinned root keeps its layout] in
    evaluation.py) makes Inductor compute ``r`` there, into a buffer of its own, laid out as
    recorded, so the call's view of it is no copy, and the later readers read the views again
    from the pin. The pin costs ``r``'s size (past the call), a copy the frontier nodes' sizes
    plus, where ``r`` stays lazy, the view the op is given: the pin is taken where it costs no
    more. Only a read of the call (the buffers it writes are decided elsewhere), only a root
    Inductor lays out itself (``pinnable``), never a node a later call writes (Note [A
    realized value a later call writes] pins those its own way) or one that costs nothing
    already (``skip``)."""
    m = read_node(call)
    buffers = m.buffers if m is not None else ()
    written = {storage_root(b) for b in buffers if isinstance(b, fx.Node)}
    taken: dict[fx.Node, list[fx.Node]] = {}
    for a in call.all_input_nodes:
        if isinstance(a.meta.get("val"), torch.Tensor):
            root = storage_root(a)
            if root not in written:
                taken.setdefault(root, []).append(a)
    on_root: dict[fx.Node, list[fx.Node]] = {}
    for f in frontier:
        root = storage_root(f)
        if f not in skip and root in taken and pinnable(root):
            on_root.setdefault(root, []).append(f)
    pins: dict[fx.Node, fx.Node] = {}
    cost = 0
    for root, nodes in on_root.items():
        copies = sum(nbytes_hint(n.meta["val"]) for n in {*nodes, *taken[root]})
        if nbytes_hint(root.meta["val"]) <= copies:
            pins.update((n, root) for n in nodes)
            cost += 0 if root in returned else nbytes_hint(root.meta["val"])
    return pins, cost

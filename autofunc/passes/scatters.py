"""The end of step 3b of the re-inplace pass (Note [Pipeline] in ``reinplace.py``): folding the
scatters that put back what a call wrote in place (``select_scatter(x, select(x, 0, l)', 0, l)``
is ``x`` once ``select(x, 0, l)`` was written directly), and the view comparisons they need.
"""

from __future__ import annotations


from typing import Any

import torch
import torch.fx as fx

from .alias import AliasAnalysis
from .memory_ops import SCATTER_VIEWS, VIEW_OPS
from .context import Pass
from .walks import view_root
from ..logs import get_logger

__all__ = ["SAME_BYTES", "all_scatters_fold", "fold_scatters"]

log = get_logger("autofunc.passes.scatters")

_aten = torch.ops.aten



# Views that keep the bytes and the geometry (up to the element size).
SAME_BYTES = frozenset({_aten.view.dtype, _aten.alias.default, _aten.detach.default})


def fold_scatters(ctx: Pass, buf: fx.Node) -> None:
    """Remove the scatters of ``buf`` (just written in place) into the memory it views.

    ``select_scatter(x, buf', 0, l)``, where ``buf'`` is ``buf`` up to dtype views and ``buf``
    is ``select(x, 0, l)`` up to dtype views (``x`` the same node or the same chain of views),
    puts back what is already there: it is ``x`` (in memory). Its readers now read ``x``'s
    memory, whose version joins ``x``'s memory class, so later writes into it are checked
    against the old readers of both. ``x`` may itself be scattered into its base next (the
    write-back of a view of a view): it is folded the same way.
    """
    graph, analysis = ctx.gm.graph, ctx.analysis
    starts = [buf]
    while starts:
        start = starts.pop()
        view = view_root(start, SAME_BYTES)
        if not isinstance(view, fx.Node) or view.op != "call_function" or not view.args:
            continue
        todo, seen = [start], {start}
        while todo:
            src = todo.pop()
            for user in list(src.users):
                if user.target in SAME_BYTES and user not in seen:
                    seen.add(user)
                    todo.append(user)
                elif _folds(analysis, user, src, view):
                    target = user.args[0]
                    analysis.merge(target, user)
                    analysis.forget(user)
                    user.replace_all_uses_with(target)
                    graph.erase_node(user)
                    starts.append(target)


def _folds(analysis: AliasAnalysis, user: fx.Node, src: fx.Node, view: fx.Node) -> bool:
    """Whether ``user`` scatters ``src`` (the bytes of ``view``) back where ``view`` took them."""
    if not (
        user.target in SCATTER_VIEWS
        and len(user.args) > 1
        and user.args[1] is src
        and src.meta["val"].dtype == user.meta["val"].dtype
        and user in analysis.version
        and user.args[0] in analysis.version
    ):
        return False
    split = _split_as_slice(view)
    if split is not None:  # Note [A split's piece is a slice]
        root, dim, start, end = split
        return (
            user.target is _aten.slice_scatter.default
            and _same_view(user.args[0], root)
            and _scatter_window(user) == (dim, start, end)
        )
    return (
        SCATTER_VIEWS[user.target] is view.target
        and _same_view(user.args[0], view.args[0])
        and _same_view_args(user, view)
    )


# Note [A split's piece is a slice]
# ``q, k, v = qkv.split([128, 64, 64], -1)`` (vLLM's attention input) makes each piece as
# ``getitem(split_with_sizes(qkv, sizes, dim), i)``: the slice ``qkv[..., s:s + sizes[i]]`` with
# ``s = sum(sizes[:i])``, and functionalization writes a piece back with
# ``slice_scatter(qkv', piece', dim, s, s + sizes[i])``. So once the piece is written in place,
# that scatter puts back what is there, exactly as for a piece made by ``slice``: it folds.
# Only static sizes and a static, normalised dimension are read this way (``split.Tensor``, equal
# pieces, too); anything else is no slice here, and its scatter stays.
def _split_as_slice(view: Any) -> tuple[fx.Node, int, int, int] | None:
    """``(root, dim, start, end)`` where ``view`` is a piece of a split of ``root`` along
    ``dim`` (static; Note [A split's piece is a slice]), else ``None``."""
    import operator

    if not (
        isinstance(view, fx.Node)
        and view.target is operator.getitem
        and isinstance(view.args[0], fx.Node)
        and isinstance(view.args[1], int)
    ):
        return None
    split, i = view.args[0], view.args[1]
    if split.target not in (_aten.split_with_sizes.default, _aten.split.Tensor):
        return None
    root = split.args[0]
    val = getattr(root, "meta", {}).get("val")
    if not isinstance(val, torch.Tensor):
        return None
    size_arg = split.args[1]
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if not isinstance(dim, int):
        return None
    dim = dim % val.dim()
    length = val.shape[dim]
    if split.target is _aten.split.Tensor:
        if not (isinstance(size_arg, int) and isinstance(length, int) and size_arg > 0):
            return None
        sizes = [min(size_arg, length - k) for k in range(0, length, size_arg)]
    else:
        sizes = list(size_arg)
    if not all(isinstance(n, int) for n in sizes) or not 0 <= i < len(sizes):
        return None
    start = sum(sizes[:i])
    return root, dim, start, start + sizes[i]


def _scatter_window(scatter: fx.Node) -> tuple[int, Any, Any] | None:
    """``(dim, start, end)`` of a ``slice_scatter`` of step 1 (dim normalised), else ``None``."""
    args = list(scatter.args) + [None] * (6 - len(scatter.args))
    dim = args[2] if args[2] is not None else scatter.kwargs.get("dim", 0)
    start = args[3] if args[3] is not None else scatter.kwargs.get("start")
    end = args[4] if args[4] is not None else scatter.kwargs.get("end")
    step = args[5] if args[5] is not None else scatter.kwargs.get("step", 1)
    val = scatter.meta.get("val")
    if step != 1 or not isinstance(val, torch.Tensor):
        return None
    if not all(type(v) is int for v in (dim, start, end)):  # never compare a SymInt (a guard)
        return None
    return dim % val.dim(), start, end


def all_scatters_fold(analysis: AliasAnalysis, out: fx.Node, buf: fx.Node) -> bool:
    """Whether every scatter of ``out`` (a HOP output, through views keeping its bytes) would
    be folded once ``buf`` is written in place and ``out`` replaced by it: then no scatter of a
    dtype view of a graph input reaches Inductor, whose lowering does not support one."""
    view = view_root(buf, SAME_BYTES)
    if not isinstance(view, fx.Node) or view.op != "call_function" or not view.args:
        # nothing left to fold: ``out`` must not be scattered anywhere else
        return not any(u.target in SCATTER_VIEWS and u.args[1] is out for u in out.users)
    todo, seen = [out], {out}
    while todo:
        src = todo.pop()
        for user in src.users:
            if user.target in SAME_BYTES and user not in seen:
                seen.add(user)
                todo.append(user)
            elif user.target in SCATTER_VIEWS:
                # and then the scatter of that scatter (the write-back of a view of a view);
                # a scatter *into* these bytes stays a scatter into a view of an input
                if not (
                    user.args[1] is src
                    and _folds(analysis, user, src, view)
                    and all_scatters_fold(analysis, user, user.args[0])
                ):
                    return False
    return True


def _same_view(a: Any, b: Any) -> bool:
    """Whether two nodes are one tensor, or the same chain of view ops of one tensor."""
    while a is not b:
        if not (
            isinstance(a, fx.Node)
            and isinstance(b, fx.Node)
            and a.op == b.op == "call_function"
            and a.target is b.target
            and a.target in VIEW_OPS
            and a.args[1:] == b.args[1:]
            and a.kwargs == b.kwargs
            and a.args
            and b.args
        ):
            return False
        a, b = a.args[0], b.args[0]
    return True


def _same_view_args(scatter: fx.Node, view: fx.Node) -> bool:
    """Whether a scatter replaces exactly the part of its input that ``view`` selects."""
    try:
        a = scatter.normalized_arguments(None, normalize_to_only_use_kwargs=True)
        b = view.normalized_arguments(None, normalize_to_only_use_kwargs=True)
    except Exception:
        log.debug("%s: arguments not normalized; not folded", scatter.name, exc_info=True)
        return False
    if a is None or b is None:
        return False
    a = {k: v for k, v in a.kwargs.items() if k not in ("input", "self", "src")}
    b = {k: v for k, v in b.kwargs.items() if k not in ("input", "self")}
    return a == b

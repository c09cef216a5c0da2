"""PyTorch's ``auto_functionalized_v2`` view entries, read as slots of a :class:`Mutation`.

PyTorch's v2 node (around an ``OpOverload`` or a higher-order op such as ``invoke_subgraph``)
records each written argument ``a`` as ``_a_base_index`` plus ``_a_alias``,
``_a_slice_dim/_start/_end`` or ``_a_size/_stride/_storage_offset``, a list argument as
``_a_length`` and ``_a_<i>_*`` (Note [Regions are PyTorch's v2 calls] in subgraph.py).
:func:`read_entry` turns one argument's entries into a :class:`~autofunc.hops.adapter.Slot`
with a relative view chain, reading each entry against the geometries it may count from
(:class:`TracedBases`). Used by the regions adapter (``subgraph.py``) and the adapter of
PyTorch's own nodes around an op (``pytorch_nodes.py``). Where the graph does not say which
view an entry stands for, :class:`~autofunc.errors.UnsupportedCallError` names the call and
the argument; an entry that is not understood raises ``TypeError``/``ValueError`` (the caller
leaves the node to PyTorch).

Imports ``adapter``, ``views``, ``errors`` and ``symbolic`` only.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from .. import views
from ..errors import UnsupportedCallError
from ..symbolic import is_plain, span_extent
from .adapter import Slot

__all__ = ["TracedBases", "read_entry", "read_slots"]


def read_entry(
    kwargs: dict, prefix: str, bases: tuple, arg: str, index: int | None, where: str
) -> Slot | None:
    """The slot a written argument's view entries describe (popped from ``kwargs``), or
    ``None`` for an absent (``None``) tensor. ``bases`` are the bases' values as traced;
    ``where`` names the region, for errors.

    Note [Region view entries count from the base as traced]
    An ``as_strided`` entry's offset counts from the start of the base's storage *as traced*:
    a base that was an earlier call's fresh output starts at offset 0 there. Once that call is
    written in place, the node standing for the base is the graph input (at offset 4 in
    ``randn(4, 4)[1:]``), and the entry read against it pointed 4 elements before the view:
    out of the input's memory (fuzz seed 20261270 #252: heap corruption under v1, a wrong
    result under v2). The node's own outputs hold each base's new value with the traced
    geometry (PyTorch clones a base preserving its strides and offset), so the chain is
    inferred against those and stays relative (Note [Relative chains] in adapter.py)."""
    base_index = kwargs.pop(f"{prefix}_base_index")
    if base_index is None:
        return None
    if f"{prefix}_alias" in kwargs:
        kwargs.pop(f"{prefix}_alias")
        chain = views.ViewChain()
    elif f"{prefix}_storage_offset" in kwargs:
        size = kwargs.pop(f"{prefix}_size")
        stride = kwargs.pop(f"{prefix}_stride")
        offset = kwargs.pop(f"{prefix}_storage_offset")
        chain = bases.choose(
            base_index,
            lambda base, geom: _strided_chain(base, geom, size, stride, offset),
            where,
            arg,
        )
    elif f"{prefix}_slice_dim" in kwargs:
        dim = kwargs.pop(f"{prefix}_slice_dim")
        start = kwargs.pop(f"{prefix}_slice_start")
        end = kwargs.pop(f"{prefix}_slice_end")
        if not all(is_plain(v) for v in (dim, start, end)):
            raise TypeError(f"a symbolic slice entry ({dim}, {start}, {end}) of a region's operand")
        chain = bases.choose(
            base_index,
            lambda base, geom: _traced_slice(base, geom, dim, start, end, where, arg),
            where,
            arg,
        )
    else:  # the base itself
        chain = views.ViewChain()
    return Slot(arg, index, base_index, chain)


def _traced_slice(
    base: torch.Tensor, geom: _Geom, dim: int, start: int, end: int, where: str, arg: str
) -> views.ViewChain | None:
    """The slice of ``base`` (its value at the call) a slice entry ``(dim, start, end)`` stands
    for when the operand was made from a base of geometry ``geom``, or ``None`` where that
    puts it outside the base.

    Note [Region slice entries count from the storage]
    PyTorch records a written operand that differs from its base in one dimension only as a
    slice whose start is the operand's storage offset over its stride there: counted from the
    start of the *storage*, not of the base, and regenerated as a slice of the base. For a
    base at a storage offset (a graph input ``randn(12)[1:]``) PyTorch's own call then takes
    ``a[1:4]`` for ``a[0:3]`` (its ``aot_eager`` gives a wrong result): the slice is moved back
    by the offset the operand counted from (Note [Where a region's view entries count from]).
    A slice past the base's end is an error naming the region and the argument: PyTorch traced
    the region on the clamped slice, a tensor of another shape than the operand eager passes,
    and no call of it computes what eager does (fuzz seed 20261270 #142: Inductor raised
    "subgraph args must have consistent values").
    """
    n = base.size(dim)
    traced = len(range(*slice(start, end).indices(n)))
    if traced != end - start:
        raise UnsupportedCallError(
            where,
            f"PyTorch traced the region on a {traced}-element slice (elements {start} to {end} "
            f"of dimension {dim}, of {n}) of an operand of {end - start} elements (PyTorch "
            "counts a slice's start from the start of the storage)",
            arg=arg,
            hint=_HINT,
        )
    if geom is None:  # symbolic: read as PyTorch wrote it
        return views.ViewChain((views.Slice(dim, start, end),))
    _, stride, offset = geom
    if stride[dim] <= 0 or offset % stride[dim]:
        return None
    first, stop = start - offset // stride[dim], end - offset // stride[dim]
    if not (0 <= first and stop <= n):
        return None
    return views.ViewChain((views.Slice(dim, first, stop),))


_HINT = (
    "Pass the region a tensor whose base starts its storage (a .clone() of the input, or a "
    "view of one)"
)


_Geom = tuple  # (size, stride, storage offset) of a base, ints


class TracedBases:
    """The bases of one region call as its view entries were traced: each one's value at the
    call (the node's own output for it) and the geometries its entries may count from.

    Note [Where a region's view entries count from]
    PyTorch reads an operand's geometry off the functional tensor as traced, and that counts
    from the base's value *when the view was made*; the region runs on the base's value at
    the call (the node's output for it shows its geometry). A functional tensor's value
    changes geometry: a graph input (at offset 1, or with a gap between rows) keeps its memory
    until a write replaces its value by a fresh, dense tensor at offset 0 (an earlier call, a
    native in-place op), and a view made before that write counts from the input's layout,
    one made after from the fresh one. Fresh values stay fresh (PyTorch's own calls clone a
    base preserving its geometry), so the candidates are the geometry at the call and, where
    the base's value is a graph input's (its new value reaches that input's copy-back), the
    input's own. An entry is read against each as a select/slice chain (any chain against the
    value at the call); one that puts the operand outside the base is out, and where the
    candidates left disagree, nothing in the graph says which view it was (fuzz seed 20261278
    #617: ``v0 = a[1:3:2]; m2(v0, v0, v0); region(v0)`` with ``a = randn(4)[1:]``, and #408,
    ``v0 = a[1, :, None]; a.mul_(2.0); region(v0)`` with ``a`` strided; wrong under PyTorch's
    own handling too): that is an error naming the region and the argument, never a guess.
    """

    def __init__(self, node: Any, originals: tuple, n: int):
        self.node, self.originals, self.n = node, originals, n

    def candidates(self, i: int) -> tuple[_Geom, ...]:
        memo = self.node.meta.setdefault("autofunc.region_base_geometries", {})
        if i not in memo:  # first read: before the pass rewrites anything
            now = _geometry(self.originals[i])
            found = _input_geometries(self.node, self.n + i, self.originals[i])
            memo[i] = (now, *sorted(g for g in found if g != now))
        return memo[i]

    def choose(self, i: int, read: Any, where: str, arg: str) -> views.ViewChain:
        base = self.originals[i]
        chains = {}
        for geom in self.candidates(i):
            chain = read(base, geom)
            if chain is not None:
                chains.setdefault(str(chain), chain)
        if len(chains) == 1:
            return next(iter(chains.values()))
        raise UnsupportedCallError(
            where,
            "PyTorch traced the region on a view of its base whose geometry counts from the "
            "base's value when the view was made, which may be any of "
            + ", ".join(f"(size {g[0]}, stride {g[1]}, offset {g[2]})" for g in self.candidates(i))
            + (
                " (the base's value changed layout before the call), and the graph does not "
                "say which"
                if chains
                else ", and each puts the view outside the base"
            ),
            arg=arg,
            hint=_HINT,
        )


def _geometry(t: torch.Tensor) -> _Geom | None:
    geom = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    flat = (*geom[0], *geom[1], geom[2])
    return geom if all(type(v) is int for v in flat) else None


def _input_geometries(node: Any, key: int, val: torch.Tensor) -> set:
    """The geometries of the graph inputs of ``val``'s shape and dtype whose copy-back the value
    ``node[key]`` reaches through the graph (a later value of one functional tensor may pass
    through views and scatters of other shapes; a candidate too many costs an error at most,
    one too few a wrong result)."""
    todo = [u for u in node.users if u.target is operator.getitem and u.args[1] == key]
    seen, found = set(todo), set()
    while todo:
        x = todo.pop()
        for u in x.users:
            if u in seen or u.op != "call_function":
                continue
            seen.add(u)
            if u.target is torch.ops.aten.copy_.default and u.args[1] is x:
                dst = u.args[0]
                if isinstance(dst, torch.fx.Node) and dst.op == "placeholder":
                    dval = dst.meta["val"]
                    if dval.shape == val.shape and dval.dtype == val.dtype:
                        geom = _geometry(dval)
                        if geom is not None:
                            found.add(geom)
                continue
            todo.append(u)
    return found


def _strided_chain(
    base: torch.Tensor, geom: _Geom, size: Any, stride: Any, offset: Any
) -> views.ViewChain | None:
    """The chain regenerating an ``as_strided`` view entry (absolute offset) from its base,
    when the operand was made from a base of geometry ``geom`` (Note [Where a region's view
    entries count from]), or ``None`` where that puts it outside the base.

    Note [Region views as selects]
    PyTorch records every written operand that is no alias or slice of its base as
    ``as_strided`` (``kv[l]`` too). Inductor (torch 2.13) lowers an ``as_strided`` whose
    storage offset is symbolic at offset 0 of the input, with or without an explicit offset
    (PyTorch's own decomposition writes every layer's region into layer 0 when shapes are
    dynamic). So the chain is inferred from the geometry (``views.infer_view``: ``select(0, l)``
    for ``kv[l]``), which Inductor lowers with its symbolic offset; a chain that still holds a
    symbolic value where an int is needed is not read (the node is left to PyTorch).
    """
    sym = [_value(v) for v in (*size, *stride, offset)]
    n = len(size)
    now = (base.size(), base.stride(), base.storage_offset())
    target = (sym[:n], sym[n : 2 * n], sym[-1])
    if geom is not None and all(type(v) is int for v in sym):
        if not _inside(geom, *target):
            return None
        if geom != _geometry(base):
            target = _moved_view(geom, base, *target)
            if target is None:
                return None
    chain = views.infer_view(*now, *target)
    steps = []
    for step in chain.steps:
        if isinstance(step, views.AsStrided):
            # Note [Relative chains] in adapter.py: the offset counts from the base's own
            step = views.AsStrided(step.size, step.stride, step.storage_offset - now[2])
        if not all(is_plain(v) for v in vars(step).values()):
            raise TypeError(f"a symbolic view step {step} of a region's operand")
        steps.append(step)
    return views.ViewChain(tuple(steps))


def _moved_view(
    geom: _Geom, base: torch.Tensor, size: list, stride: list, offset: int
) -> tuple | None:
    """The geometry, on ``base`` (the value at the call), of the view ``(size, stride,
    offset)`` made from a base of geometry ``geom``: the select/slice chain that makes it from
    ``geom`` (its size-1 dimensions aside, whose strides do not matter) applied to ``base``;
    ``None`` where no such chain makes it."""
    keep = [d for d, k in enumerate(size) if k != 1]
    chain = views.infer_view(*geom, [size[d] for d in keep], [stride[d] for d in keep], offset)
    if any(isinstance(step, views.AsStrided) for step in chain.steps):
        return None
    now = torch.empty_strided(base.size(), base.stride(), dtype=base.dtype, device="meta")
    made = chain.apply(now)
    parts = iter(zip(made.shape, made.stride()))
    out = [(1, stride[d]) if size[d] == 1 else next(parts) for d in range(len(size))]
    return (
        [k for k, _ in out],
        [st for _, st in out],
        made.storage_offset() + base.storage_offset(),
    )


def _inside(geom: _Geom, size: list, stride: list, offset: int) -> bool:
    """Whether the elements of the geometry ``(size, stride, offset)`` lie within the span of
    the elements of a base of geometry ``geom`` (static geometry only; strides are never
    negative)."""
    if any(s == 0 for s in size):
        return True
    if any(s == 0 for s in geom[0]):
        return False
    end = offset + span_extent(size, stride)
    return geom[2] <= offset and end <= geom[2] + span_extent(geom[0], geom[1])


def _value(v: Any) -> Any:
    """An int, or the SymInt a graph value stands for."""
    return v.meta["val"] if isinstance(v, torch.fx.Node) else v


def read_slots(kwargs: dict, written: list[str], bases: TracedBases, where: str) -> list[Slot]:
    """The slots of the written arguments ``written`` (schema order), their view entries popped
    from ``kwargs`` and each argument put there as ``None`` (a list as ``None`` placeholders,
    the adapter contract); leftover ``_`` entries are a ``ValueError``."""
    slots: list[Slot] = []
    for name in written:
        if f"_{name}_length" in kwargs:  # a list argument
            length = kwargs.pop(f"_{name}_length")
            entries = [
                read_entry(kwargs, f"_{name}_{i}", bases, name, i, where)
                for i in range(length or 0)
            ]
            kwargs[name] = None if length is None else [None] * length
            slots += [s for s in entries if s is not None]
        else:
            kwargs[name] = None
            slot = read_entry(kwargs, f"_{name}", bases, name, None, where)
            if slot is not None:
                slots.append(slot)
    leftover = [k for k in kwargs if k.startswith("_")]
    if leftover:
        raise ValueError(f"unknown view entries {leftover}")
    return slots

"""Regions that write their inputs: the adapter for PyTorch's ``auto_functionalized_v2`` around
a higher-order op (``invoke_subgraph``, what a ``torch.compiler.nested_compile_region`` becomes).

A region that writes a tensor it receives (a decoder block writing its layer's cache) reaches
the functional graph as PyTorch's own node, whatever op inside it writes::

    out = auto_functionalized_v2(invoke_subgraph, subgraph=<get_attr>, identifier="...",
                                 arg1=x, _arg0_base_index=0, _arg0_size=..., _arg0_stride=...,
                                 _arg0_storage_offset=..., _all_bases=[kv], _op_schema=<spec>)
    y, new_kv = out[0], out[1]     # the region's outputs, then one new value per base

Its semantics are those of PyTorch's v2 (Note [Regions are PyTorch's v2 calls]): clone each
base, regenerate each written operand as a view of its clone (the ``_<arg>_*`` view entries:
the base itself, an alias, a slice, or ``as_strided``), run the region, return its outputs and
the clones. This adapter reads it as a :class:`~autofunc.hops.adapter.Mutation`, so autofunc's
rules decide every clone (where PyTorch's re-inplacing would, after autofunc's pass); the direct
call is ``invoke_subgraph`` itself on the buffers or their clones, with its writes declared
around it where the backend cannot see them (Note [Writes Inductor cannot see] in
passes/emit.py). Nodes around an ``OpOverload`` (PyTorch's handling of an op autofunc does not
own) are not this adapter's (``accepts``): they stay PyTorch's, as the baseline.

Note [Regions are PyTorch's v2 calls]
The node is PyTorch's HOP, so its keywords are PyTorch's encoding, read here as facts of
``auto_functionalized_v2``'s contract: the op's schema travels as a ``get_attr`` of a pytree
spec (``_op_schema``), each written argument ``a`` as ``_a_base_index`` plus ``_a_alias``,
``_a_slice_dim/_start/_end`` or ``_a_size/_stride/_storage_offset`` (absolute: counted from
the start of the base's storage), a list argument as ``_a_length`` and ``_a_<i>_*``. A node
this module cannot read (another encoding, a missing spec) is left to PyTorch, with a debug
log saying why.

Imports ``adapter``, ``views``, ``errors`` and ``symbolic`` only (and PyTorch's HOP objects).
"""

from __future__ import annotations

import logging
import operator
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils import _pytree as pytree

from .. import views
from ..errors import UnsupportedCallError
from ..symbolic import span_extent
from .adapter import DirectCall, Mutation, Slot, register_adapter, registered, unregister_adapter

__all__ = ["SubgraphAdapter", "enable", "enabled"]

log = logging.getLogger("autofunc.reinplace")

_BUILTIN_V2 = torch.ops.higher_order.auto_functionalized_v2
# the node's own keywords besides the op's arguments and their view entries
_OWN = ("_all_bases", "_op_schema", "_only_clone_these_bases")


class SubgraphAdapter:
    """Reads a PyTorch ``auto_functionalized_v2`` call of a higher-order op."""

    strategy = "region"

    def accepts(self, node: Any) -> Mutation | bool:
        if not (node.args and isinstance(node.args[0], HigherOrderOperator)):
            return False
        try:
            return self.read(node)
        except UnsupportedCallError:
            raise  # a region no compiled call of which matches eager (never left to PyTorch)
        except Exception:  # an encoding this module does not know: the node stays PyTorch's
            log.debug("%s: left to PyTorch, not readable as a region call", node, exc_info=True)
            return False

    def read(self, node: Any) -> Mutation:
        hop: HigherOrderOperator = node.args[0]
        schema = _schema(node)
        kwargs = dict(node.kwargs)
        bases = tuple(kwargs.pop("_all_bases"))
        for k in _OWN:
            kwargs.pop(k, None)
        hop_val = node.meta.get("val")
        n = len(hop_val) - len(bases)
        if n < 0:
            raise ValueError("fewer outputs than bases")
        identifier = kwargs.get("identifier")
        name = f"{hop.name()}:{identifier}" if isinstance(identifier, str) else hop.name()
        # Note [Region view entries count from the base as traced]
        originals = _TracedBases(node, tuple(hop_val[n:]), n)
        slots: list[Slot] = []
        for arg in schema.arguments:
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            if f"_{arg.name}_length" in kwargs:  # a list argument
                length = kwargs.pop(f"_{arg.name}_length")
                entries = [
                    _slot(kwargs, f"_{arg.name}_{i}", originals, arg.name, i, name)
                    for i in range(length or 0)
                ]
                kwargs[arg.name] = None if length is None else [None] * length
                slots += [s for s in entries if s is not None]
            else:
                kwargs[arg.name] = None
                slot = _slot(kwargs, f"_{arg.name}", originals, arg.name, None, name)
                if slot is not None:
                    slots.append(slot)
        leftover = [k for k in kwargs if k.startswith("_")]
        if leftover:
            raise ValueError(f"unknown view entries {leftover}")
        names = [a.name for a in schema.arguments]
        order = [a.name for a in schema.arguments if not a.kwarg_only]

        def call(tensors: list[Any]) -> DirectCall:
            full = mutation.call_kwargs(tensors)
            missing = [k for k in names if k not in full]
            if missing:
                raise ValueError(f"no value for {missing}")
            positional = tuple(full.pop(k) for k in order)
            return DirectCall(
                hop,
                positional,
                full,
                n,
                eager_input_vals=False,
                returns_tuple=True,
                declares_writes=False,
            )

        mutation = Mutation(
            None,
            self.strategy,
            bases,
            tuple(slots),
            kwargs,
            name=name,
            buffer_keys=tuple(n + i for i in range(len(bases))),
            call=call,
            fixes_layouts=False,  # Note [Region operands keep no computed layout]
        )
        return mutation


# Note [Region operands keep no computed layout]
# A custom op given a buffer Inductor computes fixes that buffer's layout to the strides the
# graph records (its eager values). A region does not: after autofunc's pass, PyTorch's
# post-grad passes re-derive the fake values of the graph (``FakeTensorUpdater``), and a
# computed buffer whose recorded strides its op does not produce (``slice_scatter`` of a
# strided input: recorded with the input's stride 2, re-derived contiguous) then reaches the
# region with other strides than its other calls, which Inductor refuses ("subgraph args must
# have consistent values", fuzz seed 20261261 #242; PyTorch's own handling gives a wrong result
# there). So a non-contiguous computed buffer of a region call is copied into a fixed layout,
# like any such buffer taken other than whole (R5, Note [Layouts Inductor chooses]), and every
# buffer of a region call gets a fixed layout: an ``as_strided`` alias when written in place, a
# span copy when cloned (Note [Clones for Inductor]). A plain ``empty_strided`` + ``copy_``
# clone is not fixed (Inductor turns the copy into a computed buffer of its own layout), and
# ``invoke_subgraph`` copies an operand whose layout differs from its recorded strides: the
# region then writes that copy (seen on #242 once the first fix was in).


def _schema(node: Any) -> Any:
    """The HOP's schema, from the ``get_attr`` of its pytree spec."""
    spec = node.kwargs["_op_schema"]
    if isinstance(spec, torch.fx.Node):
        spec = getattr(node.graph.owning_module, spec.target)
    return pytree.tree_unflatten([], spec).schema


def _slot(
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
        if not all(_plain(v) for v in (dim, start, end)):
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


class _TracedBases:
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
        if not all(_plain(v) for v in vars(step).values()):
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


def _plain(v: Any) -> bool:
    if isinstance(v, tuple):
        return all(type(e) is int for e in v)
    return type(v) is int or isinstance(v, torch.dtype)


def enable(on: bool = True) -> None:
    """Let the re-inplace pass rewrite region calls (``on``, the default once autofunc's pass
    is installed), or leave them to PyTorch's re-inplacing."""
    if on:
        register_adapter(_BUILTIN_V2, SubgraphAdapter())
    else:
        unregister_adapter(_BUILTIN_V2, SubgraphAdapter)


def enabled() -> bool:
    return registered(_BUILTIN_V2, SubgraphAdapter)


enable()

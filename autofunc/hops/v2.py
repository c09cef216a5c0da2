"""autofunc's v2 strategy: clone the bases of the mutable arguments, regenerate the views.

Owns the ``autofunc_v2`` HOP, the functionalization of one op call into it (which tensors
the op receives as views of which base) and its adapter; the wire format of its keywords is
``hops.v2_wire``'s. Imports ``hops.common``, ``hops.v2_wire``, ``schema`` and ``views``; never
``hops.v1``.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

from .. import regions, views
from ..errors import AutofuncError, MalformedViewsError, UnsupportedCallError
from ..schema import RESERVED_KWARGS, OpInfo, op_info, resolve
from .adapter import Mutation, Slot, register_adapter, slot_label
from .common import (
    AutofuncHOP,
    call_result,
    Distinct,
    clone_exact,
    geometry_known,
    get_base,
    normalize_args,
    same_storage,
    op_outputs,
    below_autograd,
    functionalize_call,
    register_rules,
    run_fake,
    trace_call,
    traced_kwargs,
    write_back,
    written_back_inexactly,
)
from .v2_reads import eager_aliases, overlapping_reads, read_views
from .v2_wire import (
    ArgView,
    ReadAlias,
    ViewsEntry,
    decode_aliases,
    decode_same,
    decode_reads,
    decode_views,
    encode_aliases,
    encode_same,
    encode_reads,
    encode_views,
    regenerate,
)

__all__ = [
    "ArgView",
    "Distinct",
    "ReadAlias",
    "ViewsEntry",
    "auto_functionalized_v2",
    "autofunc_v2_autograd",
    "autofunc_v2_dense",
    "autofunc_v2_fake",
    "autofunc_v2_functionalize",
    "autofunc_v2_proxy",
    "decode_aliases",
    "decode_same",
    "decode_reads",
    "decode_views",
    "eager_aliases",
    "encode_aliases",
    "encode_same",
    "encode_reads",
    "encode_views",
    "functionalize_v2",
    "overlapping_reads",
    "read_views",
    "regenerate",
]


class AutoFunctionalizedV2(AutofuncHOP):
    """``autofunc_v2(_op: str, _bases: list[Tensor], _views: tuple, _aliases: tuple = (),
    _reads: tuple = (), _read_views: tuple = (), _same: tuple = (), **other_kwargs) ->
    (*op_outputs, *new_bases)``

    Semantics, as plain Python::

        op = resolve(_op)
        new_bases = [clone_exact(b) for b in _bases]
        args = {name: regenerate(view, new_bases) for each mutable argument}  # see decode_views
        args |= {name: regenerate(view, new_bases) for each read named in _reads}
        args |= {label: args[earlier] for each label=earlier in _same}
        args |= {read: args[mutable] for each read=mutable in _aliases}
        out = op(**other_kwargs, **args)
        return (*out, *new_bases)

    ``_views`` says, for each mutable argument of the schema, which base and which view chain
    regenerate it; it is a flat tuple of ints written by :func:`encode_views` and read by
    :func:`decode_views` (Note [A flat wire format] in ``views``). ``_reads``/``_read_views``
    do the same for the read arguments over the memory the call writes (Note [Read arguments
    see the written memory]); ``_aliases`` names those that are exactly a mutable argument's
    memory (Note [Read arguments eager aliases]); ``_same`` names the regenerated tensors
    eager passed as one object (Note [Arguments keep their identity] in common.py).

    Note [Why v2 clones bases]
    Cloning the argument (v1) leaves a view's mutation to be scattered back into its base by
    the functional program (``select_scatter`` and friends), which the re-inplace pass would then
    have to see through. Mutating a clone of the base instead lets later code re-derive every
    alias from the new base with plain view ops: no scatter appears, and re-inplacing only has
    to ask whether anybody still reads the old base.
    """


auto_functionalized_v2 = AutoFunctionalizedV2("autofunc_v2")
auto_functionalized_v2.__module__ = "torch.ops.higher_order"


def autofunc_v2_dense(
    _op: str,
    _bases: list,
    _views: tuple,
    _aliases: tuple = (),
    _reads: tuple = (),
    _read_views: tuple = (),
    _same: tuple = (),
    **kwargs: Any,
) -> tuple:
    info = op_info(resolve(_op))
    new_bases = [clone_exact(b) for b in _bases]
    new_kwargs = dict(kwargs)
    same = decode_same(_same)
    distinct = Distinct(lambda t: torch.ops.aten.alias.default(t), id)
    made: dict[str, torch.Tensor] = {}

    def tensor(label: str, view: ArgView) -> torch.Tensor:
        # Note [Arguments keep their identity]: eager's one object where it passed one
        made[label] = made[same[label]] if label in same else distinct(regenerate(view, new_bases))
        return made[label]

    for name, view in decode_views(info, _views).items():
        if isinstance(view, list):
            new_kwargs[name] = [
                None if v is None else tensor(slot_label(name, i), v) for i, v in enumerate(view)
            ]
        else:
            new_kwargs[name] = None if view is None else tensor(name, view)
    for name, view in decode_reads(info, _reads, _read_views).items():
        if isinstance(view, list):  # an element without a view is passed as the call gives it
            given = kwargs[name]
            new_kwargs[name] = [
                given[i] if v is None else tensor(slot_label(name, i), v) for i, v in enumerate(view)
            ]
        else:
            new_kwargs[name] = tensor(name, view)
    for alias in decode_aliases(_aliases):  # Note [Read arguments eager aliases]
        same = new_kwargs[alias.mutable]
        new_kwargs[alias.read] = same if alias.same_object else torch.ops.aten.alias.default(same)
    out = info.op(**new_kwargs)
    return (*op_outputs(info, out), *new_bases)


class _Bases:
    """The unique bases of one call's mutable tensors, in first-seen order.

    Mutable tensors on one storage whose bases differ or are unknown get one synthesized common
    base: a flat alias of the whole storage (made under the functionalization ``ctx``), so the
    op still sees their aliasing and the program writes the storage back through it, where
    the tensors or their bases may overlap.

    Note [Bases that overlap]
    Each base's new value is written back on its own (``write_back``), in turn. Two bases of one
    storage whose memory meets (``x`` and ``x.view(torch.int32)``: a dtype view records no
    base) each carry, where they meet, their own copy: the second write-back puts its old values
    over what the op wrote through the first (``op(x[:4], x.view(torch.int32)[4:])`` lost the
    write to ``x[:4]``: a wrong result). So such tensors get one base too, also when they are
    disjoint: the base among theirs whose memory holds them all (``x``; the others are
    regenerated from it, through a dtype view where need be), else a synthesized one.
    """

    def __init__(self, ctx: Any, tensors: list[torch.Tensor]) -> None:
        self.ctx = ctx
        self.tensors: list[torch.Tensor] = []
        self._base_of: dict[int, torch.Tensor] = {}
        groups: list[list[torch.Tensor]] = []
        for t in tensors:
            group = next((g for g in groups if same_storage(g[0], t)), None)
            if group is None:
                groups.append([t])
            else:
                group.append(t)
        for group in groups:
            bases = {id(get_base(t)): get_base(t) for t in group}
            # Note [Bases that overlap]: two bases whose memory meets are written back one
            # after the other, the second's old values over the first's new ones
            tensors_meet = len(bases) > 1 and _any_overlap(ctx, group)
            if len(bases) == 1 or not (
                tensors_meet or _any_overlap(ctx, list(bases.values()))
            ):
                for t in group:
                    self._base_of[id(t)] = get_base(t)
                continue
            common = None if tensors_meet else _covering(ctx, list(bases.values()), group)
            common = _storage_alias(ctx, group[0]) if common is None else common
            for t in group:
                self._base_of[id(t)] = common

    def base_of(self, t: torch.Tensor) -> torch.Tensor:
        return self._base_of[id(t)]

    def index_of(self, base: torch.Tensor) -> int:
        """The index of ``base`` (one of :meth:`base_of`'s answers) among ``tensors``, added
        when first seen."""
        for i, b in enumerate(self.tensors):
            if b is base:
                return i
        self.tensors.append(base)
        return len(self.tensors) - 1

    def view_of(self, t: torch.Tensor) -> ArgView:
        base = self.base_of(t)
        i = self.index_of(base)
        # The current values, not the wrappers, carry consistent geometry (see may_overlap).
        inner_base, inner_t = self.ctx.unwrap_tensors((base, t))
        chain = views.infer_view_of(inner_base, inner_t)
        return ArgView(i, chain.shifted(-inner_base.storage_offset()))


def _any_overlap(ctx: Any, group: list[torch.Tensor]) -> bool:
    """Whether two tensors of one storage may overlap, judged from their storage offsets alone."""
    if not geometry_known(ctx):
        return True
    flat = [regions.region_of_storage(t) for t in ctx.unwrap_tensors(list(group))]
    return any(regions.overlaps(a, b) for a, b in itertools.combinations(flat, 2))


def _covering(ctx: Any, bases: list[torch.Tensor], group: list[torch.Tensor]) -> Any:
    """One of ``bases`` whose storage span provably holds every tensor of ``group``, or
    ``None`` (Note [Bases that overlap]: the others are regenerated from it, a dtype view
    too)."""
    inner = ctx.unwrap_tensors(list(bases) + list(group))
    held = inner[len(bases) :]
    for base, outer in zip(bases, inner):
        if all(regions.span_holds(outer, t) for t in held):
            return base
    return None


def _storage_alias(ctx: Any, t: torch.Tensor) -> torch.Tensor:
    """A flat view of ``t``'s whole storage, made as a functional view."""
    mode = getattr(ctx, "mode", None)
    if mode is None:
        raise AutofuncError(
            "autofunc v2: mutable arguments of one call share a storage and may overlap, but their "
            "common base is unknown here (torch.func.functionalize records no view bases); "
            "functionalize this program with torch.compile or torch.export instead"
        )
    numel = t.untyped_storage().nbytes() // t.element_size()
    with mode:
        return t.as_strided((numel,), (1,), 0)


def functionalize_v2(ctx: Any, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Functionalize one call of ``op`` (under ``ctx``, a functionalization API) with v2."""
    info = op_info(op)
    kw = normalize_args(op, args, kwargs)
    arguments = dict(kw)
    bases = _Bases(ctx, [t for arg in info.mutable_args for t in _tensors(kw[arg.name])])
    _check_bases(info, kw, bases)
    entries: list[ViewsEntry] = []
    for arg in info.mutable_args:
        value = kw.pop(arg.name)
        if value is None:
            entries.append(None)
        elif arg.kind.is_list:
            entries.append([None if t is None else bases.view_of(t) for t in value])
        else:
            entries.append(bases.view_of(value))
    aliases = eager_aliases(info, arguments, ctx)
    for alias in aliases:
        del kw[alias.read]
    reads = read_views(info, arguments, ctx, bases, skip={a.read for a in aliases})
    for name, entry in reads.items():  # the op gets these from the bases
        if isinstance(entry, list):  # an element without a view is passed as it is
            kw[name] = [t if v is None else None for t, v in zip(kw[name], entry)]
        else:
            del kw[name]
    unwrapped = ctx.unwrap_tensors(kw)
    extra: dict[str, Any] = {"_aliases": encode_aliases(aliases)} if aliases else {}
    if reads:
        extra["_reads"], extra["_read_views"] = encode_reads(reads)
    same = _same_objects(info, arguments, reads)
    if same:
        extra["_same"] = encode_same(same)
    with ctx.redispatch_to_next():
        flat = auto_functionalized_v2(
            info.qualname,
            _bases=ctx.unwrap_tensors(bases.tensors),
            _views=encode_views(entries),
            **unwrapped,
            **extra,
        )
    outs, new_bases = flat[: info.num_returns], flat[info.num_returns :]
    for old, new in zip(bases.tensors, new_bases, strict=True):
        write_back(ctx, old, new)
    return call_result(ctx, info, outs, arguments)


def _same_objects(info: OpInfo, arguments: dict, reads: dict) -> dict[str, str]:
    """Of the tensors the HOP regenerates from the bases (the mutable ones, then the read
    views, as the op receives them), each that eager passed as the very object of an earlier
    one, by label (``"xs[2]"``): ``{label: earlier label}`` (Note [Arguments keep their
    identity] in common.py)."""
    labelled: list[tuple[str, Any]] = []
    for arg in info.mutable_args:
        value = arguments.get(arg.name)
        if arg.kind.is_list:
            labelled += [
                (slot_label(arg.name, i), t) for i, t in enumerate(value or ()) if t is not None
            ]
        elif value is not None:
            labelled.append((arg.name, value))
    for name, entry in reads.items():
        value = arguments[name]
        if isinstance(entry, list):
            labelled += [(slot_label(name, i), value[i]) for i, v in enumerate(entry) if v is not None]
        else:
            labelled.append((name, value))
    first: dict[int, str] = {}
    return {
        label: first[id(t)]
        for label, t in labelled
        if first.setdefault(id(t), label) != label
    }


def _check_bases(info: OpInfo, kw: dict, bases: _Bases) -> None:
    """Refuse a call whose new base functionalization would write back wrongly (Note [Writing
    back unfold views] in ``common``), naming the first argument on that base."""
    for arg in info.mutable_args:
        for t in _tensors(kw[arg.name]):
            if written_back_inexactly(bases.base_of(t)):
                raise UnsupportedCallError(
                    info.qualname,
                    "it is a view made by unfold whose base is not known here, and PyTorch's "
                    "functionalization writes a new value back through unfold wrongly (the "
                    "elements no window covers become 0; pytorch#198102)",
                    arg=arg.name,
                    hint="Compile with torch.compile or torch.export (they track the base), or "
                    "pass the op a tensor that is not an unfold view",
                )


def _tensors(value: Any) -> list[torch.Tensor]:
    if value is None:
        return []
    return [t for t in value if t is not None] if isinstance(value, (list, tuple)) else [value]


class V2Adapter:
    """Reads an ``autofunc_v2`` call for the re-inplace pass: one buffer per base, each mutable
    tensor a (relative) view chain of its base (``hops.adapter``)."""

    strategy = "v2"

    def read(self, node: Any) -> Mutation:
        info = op_info(resolve(node.args[0]))
        kwargs = {k: v for k, v in node.kwargs.items() if k not in RESERVED_KWARGS}
        slots = []
        for name, entry in decode_views(info, node.kwargs["_views"]).items():
            if isinstance(entry, list):
                kwargs[name] = [None] * len(entry)
                slots += [
                    Slot(name, i, v.base_index, v.chain)
                    for i, v in enumerate(entry)
                    if v is not None
                ]
            else:
                kwargs[name] = None
                if entry is not None:
                    slots.append(Slot(name, None, entry.base_index, entry.chain))
        names = node.kwargs.get("_reads")
        reads = decode_reads(info, names, node.kwargs.get("_read_views", ())) if names else {}
        for name, entry in reads.items():  # Note [Read arguments see the written memory]
            if isinstance(entry, list):  # the elements without a view stay in kwargs
                slots += [
                    Slot(name, i, v.base_index, v.chain, read_only=True)
                    for i, v in enumerate(entry)
                    if v is not None
                ]
            else:
                kwargs[name] = None
                slots.append(Slot(name, None, entry.base_index, entry.chain, read_only=True))
        by_label = {s.label: s for s in slots}
        for alias in decode_aliases(node.kwargs.get("_aliases", ())):
            # Note [Read arguments eager aliases]: the memory of ``alias.mutable``
            of = by_label[alias.mutable]
            kwargs[alias.read] = None
            slots.append(
                Slot(
                    alias.read,
                    None,
                    of.buffer,
                    of.relative_chain,
                    same_as=alias.mutable,
                    same_object=alias.same_object,
                )
            )
        bases = tuple(node.kwargs["_bases"])
        traced = traced_kwargs(node)
        mutation = Mutation(info, self.strategy, bases, tuple(slots), kwargs, traced=traced)
        wire = node.kwargs.get("_same")
        if not wire:
            return mutation
        same = decode_same(wire)
        if any(k not in by_label or v not in by_label for k, v in same.items()):
            raise MalformedViewsError(f"_same names a tensor the call does not regenerate: {same}")
        return dataclasses.replace(mutation, same_objects=tuple(same.items()))


# -- the rules of ``autofunc_v2`` (the shared bodies: hops/common.py) -------------------------


def autofunc_v2_fake(mode: FakeTensorMode, _op: str, **kwargs: Any) -> tuple:
    return run_fake(mode, autofunc_v2_dense, _op, kwargs)


def autofunc_v2_proxy(mode: ProxyTorchDispatchMode, _op: str, **kwargs: Any) -> tuple:
    return trace_call(mode, auto_functionalized_v2, _op, kwargs)


def autofunc_v2_functionalize(ctx: Any, _op: str, **kwargs: Any) -> tuple:
    return functionalize_call(ctx, auto_functionalized_v2, _op, kwargs)


def autofunc_v2_autograd(_op: str, **kwargs: Any) -> tuple:
    return below_autograd(auto_functionalized_v2, _op, kwargs)


# -- registration -----------------------------------------------------------------------------

register_rules(
    auto_functionalized_v2,
    dense=autofunc_v2_dense,
    fake=autofunc_v2_fake,
    proxy=autofunc_v2_proxy,
    functionalize=autofunc_v2_functionalize,
    autograd=autofunc_v2_autograd,
)
register_adapter(auto_functionalized_v2, V2Adapter())

"""autofunc's v2 strategy: clone the bases of the mutable arguments, regenerate the views.

Owns the ``autofunc_v2`` HOP, the wire format of its ``_views`` keyword (built on
``views.encode_chain``) and the functionalization of one op call into it. Imports
``hops.common``, ``schema`` and ``views``; never ``hops.v1``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

from .. import regions, views
from ..errors import AutofuncError, MalformedViewsError, UnsupportedCallError
from ..schema import OpInfo, op_info, resolve
from .adapter import Mutation, Slot, register_adapter
from .common import (
    AutofuncHOP,
    call_result,
    Distinct,
    clone_exact,
    geometry_known,
    get_base,
    normalize_args,
    same_memory,
    same_storage,
    op_outputs,
    below_autograd,
    functionalize_call,
    register_rules,
    run_fake,
    trace_call,
    write_back,
    written_back_inexactly,
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
    "decode_views",
    "eager_aliases",
    "encode_aliases",
    "encode_views",
    "functionalize_v2",
    "regenerate",
]


class AutoFunctionalizedV2(AutofuncHOP):
    """``autofunc_v2(_op: str, _bases: list[Tensor], _views: tuple, **other_kwargs)
    -> (*op_outputs, *new_bases)``

    Semantics, as plain Python::

        op = resolve(_op)
        new_bases = [clone_exact(b) for b in _bases]
        args = {name: regenerate(view, new_bases) for each mutable argument}  # see decode_views
        out = op(**other_kwargs, **args)
        return (*out, *new_bases)

    ``_views`` says, for each mutable argument of the schema, which base and which view chain
    regenerate it; it is a flat tuple of ints written by :func:`encode_views` and read by
    :func:`decode_views` (Note [A flat wire format] in ``views``).

    Note [Why v2 clones bases]
    Cloning the argument (v1) leaves a view's mutation to be scattered back into its base by
    the functional program (``select_scatter`` and friends), which the re-inplace pass would then
    have to see through. Mutating a clone of the base instead lets later code re-derive every
    alias from the new base with plain view ops: no scatter appears, and re-inplacing only has
    to ask whether anybody still reads the old base.
    """


auto_functionalized_v2 = AutoFunctionalizedV2("autofunc_v2")
auto_functionalized_v2.__module__ = "torch.ops.higher_order"


@dataclasses.dataclass(frozen=True)
class ArgView:
    """How one mutable tensor is regenerated: ``chain`` applied to base ``base_index``.

    An ``AsStrided`` step's storage offset is stored relative to the base's own offset, so the
    chain applies unchanged to a clone of the base (offset 0) or to the base itself.
    """

    base_index: int
    chain: views.ViewChain


# One mutable argument: a tensor, a list (whose elements may be None), or None.
ViewsEntry = ArgView | list[ArgView | None] | None


def encode_views(entries: Sequence[ViewsEntry]) -> tuple:
    """The ``_views`` keyword for one call: one entry per mutable argument, in schema order.

    Each entry is its tensor count (``-1`` for ``None``, ``1`` for a tensor, the length for a
    list), then per tensor its base index and ``views.encode_chain`` of its chain, or ``-1``
    alone for a ``None`` element of a list. E.g. one tensor argument that is ``bases[0][0]``:
    ``(1, 0, 1, 0, 0, 0)``.
    """
    wire: list = []
    for entry in entries:
        if entry is None:
            wire.append(-1)
            continue
        arg_views = entry if isinstance(entry, list) else [entry]
        wire.append(len(arg_views))
        for view in arg_views:
            if view is None:
                wire.append(-1)
            else:
                wire += [view.base_index, *views.encode_chain(view.chain)]
    return tuple(wire)


def decode_views(info: OpInfo, wire: Sequence) -> dict[str, ViewsEntry]:
    """``_views`` -> ``{mutable arg name: ArgView | [ArgView, ...] | None}``. The result is
    shared between calls with the same op and wire (a decoder's layers): read it, never change
    it.

    Raises:
        ValueError: When ``wire`` does not match the op's mutable arguments.
    """
    # a wire of plain ints (no SymInt, no node) decodes to the same immutable chains each time
    key = (id(info), wire) if type(wire) is tuple and all(type(x) is int for x in wire) else None
    if key is not None:
        hit = _DECODED.get(key)
        if hit is not None and hit[0] is info:
            return hit[1]
    out = _decode_views(info, wire)
    if key is not None:
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[key] = (info, out)  # holding ``info`` keeps its id from being reused
    return out


_DECODED: dict[tuple[int, tuple], tuple[OpInfo, dict[str, ViewsEntry]]] = {}
_DECODED_MAX = 4096


def _decode_views(info: OpInfo, wire: Sequence) -> dict[str, ViewsEntry]:
    out: dict[str, ViewsEntry] = {}
    pos = 0
    for arg in info.mutable_args:
        count, pos = wire[pos], pos + 1
        if count == -1:
            out[arg.name] = None
            continue
        arg_views: list[ArgView | None] = []
        for _ in range(count):
            base_index = wire[pos]
            if base_index == -1 and arg.kind.is_list:  # a None element
                arg_views.append(None)
                pos += 1
                continue
            chain, pos = views.read_chain(wire, pos + 1)
            arg_views.append(ArgView(base_index, chain))
        if arg.kind.is_list:
            out[arg.name] = arg_views
        elif len(arg_views) == 1:
            out[arg.name] = arg_views[0]
        else:
            raise MalformedViewsError(
                f"_views gives {count} tensors for {arg.name} of {info.qualname}"
            )
    if pos != len(wire):
        raise MalformedViewsError(f"trailing values in _views of {info.qualname}: {wire!r}")
    return out


def regenerate(view: ArgView, bases: list[torch.Tensor]) -> torch.Tensor:
    """The argument ``view`` describes, as a view of ``bases[view.base_index]``."""
    base = bases[view.base_index]
    return view.chain.shifted(base.storage_offset()).apply(base)


def autofunc_v2_dense(
    _op: str, _bases: list, _views: tuple, _aliases: tuple = (), **kwargs: Any
) -> tuple:
    info = op_info(resolve(_op))
    new_bases = [clone_exact(b) for b in _bases]
    new_kwargs = dict(kwargs)
    distinct = Distinct(lambda t: torch.ops.aten.alias.default(t), id)
    for name, view in decode_views(info, _views).items():
        if isinstance(view, list):
            new_kwargs[name] = [
                None if v is None else distinct(regenerate(v, new_bases)) for v in view
            ]
        else:
            new_kwargs[name] = None if view is None else distinct(regenerate(view, new_bases))
    for alias in decode_aliases(_aliases):  # Note [Read arguments eager aliases]
        same = new_kwargs[alias.mutable]
        new_kwargs[alias.read] = same if alias.same_object else torch.ops.aten.alias.default(same)
    out = info.op(**new_kwargs)
    return (*op_outputs(info, out), *new_bases)


class _Bases:
    """The unique bases of one call's mutable tensors, in first-seen order.

    Mutable tensors on one storage whose bases differ or are unknown get one synthesized common
    base: a flat alias of the whole storage (made under the functionalization ``ctx``), so the
    op still sees their aliasing and the program writes the storage back through it.
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
            if len(bases) == 1 or not _any_overlap(ctx, group):
                for t in group:
                    self._base_of[id(t)] = get_base(t)
                continue
            common = _storage_alias(ctx, group[0])
            for t in group:
                self._base_of[id(t)] = common

    def base_of(self, t: torch.Tensor) -> torch.Tensor:
        return self._base_of[id(t)]

    def view_of(self, t: torch.Tensor) -> ArgView:
        base = self.base_of(t)
        for i, b in enumerate(self.tensors):
            if b is base:
                break
        else:
            self.tensors.append(base)
            i = len(self.tensors) - 1
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
    unwrapped = ctx.unwrap_tensors(kw)
    extra = {"_aliases": encode_aliases(aliases)} if aliases else {}
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


class ReadAlias(NamedTuple):
    """A read-only argument the op receives as the memory of mutable argument ``mutable``:
    the very object eager passed as both (``same_object``), or another object over exactly
    that memory (Note [Read arguments eager aliases])."""

    read: str
    mutable: str
    same_object: bool = True


def eager_aliases(info: OpInfo, arguments: dict, ctx: Any = None) -> list[ReadAlias]:
    """The read-only tensor arguments of a call (its arguments by name) that are, in eager,
    exactly the memory of a (single-tensor) mutable argument: the very object passed as that
    argument, or, under a functionalization ``ctx`` that knows geometry, a tensor of the same
    storage, storage offset, sizes, strides and dtype (``common.same_memory``).

    Note [Read arguments eager aliases]
    An in-place kernel may take one memory as both its input and its output: SGLang's rope
    passes ``q`` and ``q_rope=q`` (``rope(q, k, q, k)``, one object) or, in its public wrapper,
    ``query.view(-1, H, D)`` twice (two objects over one memory). In eager it reads and writes
    that memory, which is its contract: what it reads may be what it has already written.
    Functionalized plainly, the op would read the old ``q`` and write a copy, a call eager never
    made: another result for an op that reads what it wrote (``copy_into``), and a copy the
    re-inplace pass must keep (the read overlaps the write: the rule "read by the same call",
    ``READ_BY_CALL``). So the read argument is not passed to the HOP at all: ``_aliases`` names
    it and the mutable argument whose memory it is, and the HOP hands the op the regenerated
    mutable tensor for both (a fresh ``alias`` of it where eager passed two objects:
    Note [Arguments keep their identity] in common.py), whether the pass then writes the base in
    place or keeps a clone for another reason: the read sees the written memory either way, as
    in eager. Which reads qualify: Note [A read argument over exactly the written memory] in
    common.py. Only a single-tensor mutable argument is named (the wire names it); a read of a
    list element's memory stays a read of its own.
    """
    singles = {
        a.name: arguments[a.name]
        for a in info.mutable_args
        if not a.kind.is_list and arguments.get(a.name) is not None
    }
    mutable_names = {a.name for a in info.mutable_args}
    out = []
    for name, value in arguments.items():
        if name in mutable_names or not isinstance(value, torch.Tensor):
            continue
        same = next((m for m, t in singles.items() if t is value), None)
        if same is not None:
            out.append(ReadAlias(name, same))
            continue
        if ctx is None:
            continue
        same = next((m for m, t in singles.items() if same_memory(ctx, t, value)), None)
        if same is not None:
            out.append(ReadAlias(name, same, same_object=False))
    return out


def encode_aliases(aliases: Sequence[ReadAlias | tuple[str, str]]) -> tuple[str, ...]:
    """The ``_aliases`` keyword: per read argument, ``"read=mutable"`` where eager passed one
    object as both, ``"read~mutable"`` where it passed another object over the same memory."""
    out = []
    for alias in (ReadAlias(*a) for a in aliases):  # a pair: one object
        out.append(f"{alias.read}{'=' if alias.same_object else '~'}{alias.mutable}")
    return tuple(out)


def decode_aliases(wire: Sequence[str]) -> list[ReadAlias]:
    """``_aliases`` -> ``[ReadAlias, ...]``."""
    out = []
    for item in wire:
        text = str(item)
        cut = min((i for i in (text.find("="), text.find("~")) if i >= 0), default=-1)
        read, mutable = text[:cut], text[cut + 1 :]
        if cut < 0 or not read or not mutable:
            raise MalformedViewsError(f"malformed _aliases entry {item!r}")
        out.append(ReadAlias(read, mutable, same_object=text[cut] == "="))
    return out


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
        kwargs = {
            k: v for k, v in node.kwargs.items() if k not in ("_bases", "_views", "_aliases")
        }
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
        return Mutation(info, self.strategy, tuple(node.kwargs["_bases"]), tuple(slots), kwargs)


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

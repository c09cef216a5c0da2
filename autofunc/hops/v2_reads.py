"""Which read arguments of one call the ``autofunc_v2`` op receives from the call's bases.

A read-only argument that is exactly a mutable argument's memory is an alias of it
(:func:`eager_aliases`, the ``_aliases`` keyword); one that shares the written memory in
another geometry is regenerated from the base of the mutable tensor it overlaps
(:func:`read_views`, the ``_reads``/``_read_views`` keywords). Both hold what the op sees in
eager. Imports ``hops.adapter`` (``slot_label``), ``hops.common``, ``hops.v2_wire``, ``regions``,
``schema`` and ``views``; never ``hops.v2`` (which hands in its bases as :class:`Bases`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from .. import regions, views
from ..schema import OpInfo
from .adapter import slot_label
from .common import geometry_known, get_base, may_overlap, same_memory
from .v2_wire import ArgView, ReadAlias, ViewsEntry

__all__ = ["Bases", "eager_aliases", "overlapping_reads", "read_views"]


class Bases(Protocol):
    """The bases of one call's mutable tensors (``hops.v2._Bases``)."""

    def base_of(self, t: torch.Tensor) -> torch.Tensor: ...

    def index_of(self, base: torch.Tensor) -> int: ...


def overlapping_reads(info: OpInfo, arguments: dict, ctx: Any) -> list[tuple[str, str]]:
    """``(read label, mutable label)`` for each read-only tensor of a call (by argument name,
    ``name[i]`` for a list element) that may share memory with a mutable tensor of it, under a
    functionalization ``ctx`` that knows geometry (else none: views there report no real
    geometry, Note [Read arguments see the written memory])."""
    if not geometry_known(ctx):
        return []
    mutable = _labelled(info, arguments, mutable=True)
    out = []
    for label, r in _labelled(info, arguments, mutable=False):
        hit = next((m for m, t in mutable if t is r or may_overlap(ctx, r, t)), None)
        if hit is not None:
            out.append((label, hit))
    return out


def read_views(
    info: OpInfo, arguments: dict, ctx: Any, bases: Bases, skip: set[str] = frozenset()
) -> dict[str, ViewsEntry]:
    """The read-only arguments of a call that the op receives as views of the call's bases
    (not those named in ``skip``): each tensor that may share memory with a mutable tensor,
    regenerated from that tensor's base; a list as one entry per element (``None``: passed as
    it is).

    Note [Read arguments see the written memory]
    In eager an op reads its read arguments in the memory it writes: ``op(dst=v, src=x)`` with
    ``v = x.t()``, ``op(x.view(4, 8), x)``, ``op([b], b)``, ``op(x, x.view(torch.int32))``. Its
    reads and writes interleave there, so what it reads may be what it has already written, and
    its result depends on that for any op that reads after writing. Functionalized plainly,
    the op would read a copy of the old value: another result for such an op, and a clone of
    the written buffer the re-inplace pass must keep (the read overlaps the write: the rule
    "read by the same call"), bytes PyTorch's built-in v2 does not spend where it writes in
    place. So such a read is no input of the HOP: ``_reads`` names it, ``_read_views`` says how
    to regenerate it from the base of the mutable tensor it overlaps (the chain
    ``views.infer_view_of`` finds, a dtype view too), and the HOP hands the op that view of
    the new base, which the op writes: its reads see its writes, as in eager, whether the
    pass then writes the base in place or keeps a clone for another reason. A read keeps its
    copy (a read of its own, of the old value) where that cannot be done:

    * geometry is unknown (``torch.func.functionalize``: views report no real geometry);
    * it overlaps mutable tensors of two bases (neither base's copy holds what the op writes
      through the other);
    * it is not provably inside the base's memory (a clone of the base copies only that span;
      a read past it, or one whose extent is symbolic and undecided, would read elsewhere);
    * no chain of the base has its dtype and geometry.

    The pass then keeps the copy and names the read in its report (``READ_BY_CALL``);
    docs/limitations.md lists these cases. A read that is exactly a mutable argument's memory
    is named in ``_aliases`` instead (Note [Read arguments eager aliases]): the op gets that
    argument's tensor (or an alias of it) rather than a view regenerated on its own.
    """
    if not geometry_known(ctx):
        return {}
    mutable = [t for _, t in _labelled(info, arguments, mutable=True)]
    out: dict[str, ViewsEntry] = {}
    for arg in info.op._schema.arguments:
        value = arguments.get(arg.name)
        if arg.name in skip or arg.name in info.mutable_names:
            continue
        if isinstance(value, torch.Tensor):
            view = _read_view(ctx, bases, value, mutable)
            if view is not None:
                out[arg.name] = view
        elif isinstance(value, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in value):
            elems = [
                _read_view(ctx, bases, t, mutable) if isinstance(t, torch.Tensor) else None
                for t in value
            ]
            if any(v is not None for v in elems):
                out[arg.name] = elems
    return out


def _read_view(
    ctx: Any, bases: Bases, r: torch.Tensor, mutable: list[torch.Tensor]
) -> ArgView | None:
    """How read tensor ``r`` is regenerated from a base of the call (Note [Read arguments see
    the written memory]), or ``None`` where it stays a read of its own."""
    over = [t for t in mutable if may_overlap(ctx, r, t)]
    owners = {id(bases.base_of(t)): bases.base_of(t) for t in over}
    if len(owners) != 1:
        return None
    (base,) = owners.values()
    inner_base, inner_r = ctx.unwrap_tensors((base, r))
    try:
        chain = views.infer_view_of(inner_base, inner_r)
    except ValueError:
        return None
    if not (get_base(r) is base and not chain.uses_as_strided):
        if not regions.span_holds(inner_base, inner_r):
            return None
    return ArgView(bases.index_of(base), chain.shifted(-inner_base.storage_offset()))


def _labelled(info: OpInfo, arguments: dict, *, mutable: bool) -> list[tuple[str, torch.Tensor]]:
    """``(label, tensor)`` for the call's mutable (or read-only) tensors, lists elementwise."""
    names = set(info.mutable_names)
    out = []
    for name, value in arguments.items():
        if (name in names) != mutable:
            continue
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            out += [(slot_label(name, i), t) for i, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return out


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
    list element's memory, like any other read over the written memory, is regenerated from
    the base with its own chain (Note [Read arguments see the written memory]).
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

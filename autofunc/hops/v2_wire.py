"""The wire format of an ``autofunc_v2`` call: how each tensor the op receives is named.

``_views`` (:func:`encode_views`) regenerates each mutable argument from a base; ``_aliases``
(:func:`encode_aliases`) names the read arguments that are exactly the memory of a mutable one;
``_reads`` and ``_read_views`` (:func:`encode_reads`) regenerate the other read arguments that
share the memory the call writes from a base, as mutable ones are (Note [Read arguments see the
written memory] in hops/v2.py); ``_same`` (:func:`encode_same`) names the tensors regenerated
from the bases that eager passed as one object (Note [Arguments keep their identity] in
hops/common.py). All of it is flat tuples of ints or strings (Note [A flat wire format] in
``views``). Imports ``views``, ``schema`` and ``errors`` only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import torch

from .. import views
from ..errors import MalformedViewsError
from ..schema import OpInfo

__all__ = [
    "ArgView",
    "ReadAlias",
    "ViewsEntry",
    "decode_aliases",
    "decode_reads",
    "decode_same",
    "decode_views",
    "encode_aliases",
    "encode_reads",
    "encode_same",
    "encode_views",
    "regenerate",
]


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
    args = [(a.name, a.kind.is_list) for a in info.mutable_args]
    return _decode_entries(info.qualname, "_views", args, wire)


def _decode_entries(
    qualname: str, keyword: str, args: Sequence[tuple[str, bool]], wire: Sequence
) -> dict[str, ViewsEntry]:
    """Entries written by :func:`encode_views`, one per ``(name, is_list)`` of ``args``."""
    out: dict[str, ViewsEntry] = {}
    pos = 0
    for name, is_list in args:
        if pos >= len(wire):
            raise MalformedViewsError(f"{keyword} of {qualname} ends before {name}: {wire!r}")
        count, pos = wire[pos], pos + 1
        if count == -1:
            out[name] = None
            continue
        arg_views: list[ArgView | None] = []
        for _ in range(count):
            base_index = wire[pos]
            if base_index == -1 and is_list:  # a None element
                arg_views.append(None)
                pos += 1
                continue
            chain, pos = views.read_chain(wire, pos + 1)
            arg_views.append(ArgView(base_index, chain))
        if is_list:
            out[name] = arg_views
        elif len(arg_views) == 1:
            out[name] = arg_views[0]
        else:
            raise MalformedViewsError(f"{keyword} gives {count} tensors for {name} of {qualname}")
    if pos != len(wire):
        raise MalformedViewsError(f"trailing values in {keyword} of {qualname}: {wire!r}")
    return out


def regenerate(view: ArgView, bases: list[torch.Tensor]) -> torch.Tensor:
    """The argument ``view`` describes, as a view of ``bases[view.base_index]``."""
    base = bases[view.base_index]
    return view.chain.shifted(base.storage_offset()).apply(base)



class ReadAlias(NamedTuple):
    """A read-only argument the op receives as the memory of mutable argument ``mutable``:
    the very object eager passed as both (``same_object``), or another object over exactly
    that memory (Note [Read arguments eager aliases])."""

    read: str
    mutable: str
    same_object: bool = True



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


def encode_reads(reads: dict[str, ViewsEntry]) -> tuple[tuple[str, ...], tuple]:
    """The ``_reads`` and ``_read_views`` keywords: the names of the read arguments the op
    receives as views of the call's bases, and their entries in :func:`encode_views`'s format
    (a list argument's element given as ``-1`` is passed to the op as the call gives it)."""
    return tuple(reads), encode_views(list(reads.values()))


def decode_reads(info: OpInfo, names: Sequence[str], wire: Sequence) -> dict[str, ViewsEntry]:
    """``_reads``, ``_read_views`` -> ``{read arg name: ArgView | [ArgView | None, ...]}``.

    Raises:
        MalformedViewsError: When a name is no read-only tensor argument of the op, or the
            wire does not match the names.
    """
    if not names:
        return {}
    mutable = set(info.mutable_names)
    for name in names:
        if name not in info.arg_names or name in mutable:
            raise MalformedViewsError(f"_reads names {name!r}, no read argument of {info.qualname}")
    args = [(n, n in info.tensor_list_args) for n in names]
    return _decode_entries(info.qualname, "_read_views", args, wire)



def encode_same(same: dict[str, str]) -> tuple[str, ...]:
    """The ``_same`` keyword: ``"label=earlier"`` for each tensor regenerated from the bases
    (a mutable argument or element, ``"xs[2]"``, or a read view) that eager passed as the very
    object it passed as the ``earlier`` one."""
    return tuple(f"{label}={earlier}" for label, earlier in same.items())


def decode_same(wire: Sequence[str]) -> dict[str, str]:
    """``_same`` -> ``{label: earlier label}``."""
    out = {}
    for item in wire:
        label, sep, earlier = str(item).partition("=")
        if not sep or not label or not earlier or earlier == label:
            raise MalformedViewsError(f"malformed _same entry {item!r}")
        out[label] = earlier
    return out

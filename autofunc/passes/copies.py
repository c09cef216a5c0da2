"""Every copy a graph makes, and what it is for: ``CopyKind``, ``Copy``, ``account_copies``.

The pass's :class:`~autofunc.passes.report.Decision`\\ s say which buffers keep a clone; the
graph the pass leaves may hold other copies made for the same mutations. This module names all
of them, so the :class:`~autofunc.passes.report.Report` counts what the graph copies, not only
what the rules decided.

Note [Every copy in the report]
A copy node is a clone, a ``copy``/``copy_`` into a buffer, or a view scatter (each scatter
materializes its whole output): :data:`COPY_TARGETS`. Its bytes are those of the tensor it
writes (for ``copy_`` its destination), by size hint where symbolic. Each copy node of the final
graph gets one :class:`CopyKind`:

* nodes the pass emits while it rewrites a call are tagged as they are emitted (``copying``
  around each step, read by ``emit.emit``): the clones it keeps (``CLONE``), the buffers it
  computes read values into before a call (``REALIZED``), fresh outputs it copies out of a
  written input (``OUTPUT``), the copies a backend repair adds (``REPAIR``; a repair that builds
  nodes itself is tagged by comparing the copy nodes before and after it);
* before a call is rewritten, the copies that put the call's written values back into memory
  (v1's write-back scatters, the epilogue ``copy_`` into a graph input) are found from the
  call's outputs, forwards through views and through scatters and ``copy_`` that take the
  value as their source, and tagged ``WRITE_BACK``. Folding a scatter erases it, tag and all;
* every other copy node is ``OTHER``: the program's own (``x.clone()``, a functionalized
  ``x[0].add_(1)``), which eager makes as well, another pass's, or one that writes back a node
  no adapter accepted (a PyTorch node the pass leaves to PyTorch).

Inductor's own re-inplacing runs after autofunc's pass and turns each remaining scatter into a
``clone`` plus a ``copy_`` into a view of it, or a ``copy_`` into a view of its input, nodes
without tags. :func:`account_copies` gives such a ``copy_`` the kind of the scatter whose
source it copies (the source nodes of the tagged scatters carry it) and such a ``clone`` the
kind of the ``copy_`` that writes into it, so a report re-counted after Inductor's passes
(``autofunc/backends/inductor/glue.py``) still names what each copy is for.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any

import torch
from torch import fx

from ..symbolic import nbytes_hint
from .memory_ops import SCATTER_VIEWS, VIEW_OPS
from .walks import users_through_views, view_walk

__all__ = [
    "COPY_TARGETS",
    "Copy",
    "CopyKind",
    "account_copies",
    "copy_nbytes",
    "copy_node_set",
    "copy_tag",
    "set_copy_tag",
    "copying",
    "tag_emitted",
    "tag_new_copies",
    "tag_write_backs",
]

_aten = torch.ops.aten

# The ops that copy memory in a post-grad graph.
COPY_TARGETS = frozenset(
    {_aten.clone.default, _aten.copy.default, _aten.copy_.default} | set(SCATTER_VIEWS)
)

_TAG = "autofunc.copy"  # (CopyKind, call name) of a copy node
_SCATTERS_FROM = "autofunc.copy_source"  # on a scatter's source: the scatter's tag


class CopyKind(enum.Enum):
    """What a copy node of the final graph is for (Note [Every copy in the report])."""

    CLONE = "a clone of a buffer the op writes (the decision's)"
    REALIZED = "a value read before the call, computed into a buffer of its own"
    WRITE_BACK = "puts the call's written value back into the memory it came from"
    OUTPUT = "a returned value copied out of a graph input written in place"
    REPAIR = "a copy a backend repair adds"
    OTHER = (
        "not made for a call the pass decided: the program's own, another pass's, or one for a "
        "node the pass leaves to PyTorch"
    )


@dataclasses.dataclass(frozen=True)
class Copy:
    """One copy node of the final graph."""

    node: str
    kind: CopyKind
    call: str  # the call it is made for; "" for OTHER and copies made for the graph as a whole
    nbytes: int

    @property
    def for_mutation(self) -> bool:
        return self.kind is not CopyKind.OTHER


def copy_tag(node: fx.Node) -> tuple[CopyKind, str] | None:
    """``(kind, call)`` of a copy node the pass tagged (``copying``); ``None`` for any other."""
    return node.meta.get(_TAG)


def set_copy_tag(node: fx.Node, tag: tuple[CopyKind, str]) -> None:
    """Tag the copy node ``node`` as ``(kind, call)`` (a repair's copy that stands for another)."""
    node.meta[_TAG] = tag


def copy_nbytes(node: fx.Node) -> int:
    """The bytes ``node`` writes: its output's, or for ``copy_`` its destination's."""
    val = node.meta.get("val")
    if node.target is _aten.copy_.default and isinstance(node.args[0], fx.Node):
        val = node.args[0].meta.get("val", val)
    return nbytes_hint(val)


def _copy_nodes(graph: fx.Graph) -> list[fx.Node]:
    return sorted(n for t in COPY_TARGETS for n in graph.find_nodes(op="call_function", target=t))


class copying:  # noqa: N801 - used as a function: ``with copying(ctx, kind, call):``
    """Inside the block, the copy nodes ``emit`` inserts for ``ctx`` are tagged ``(kind, call)``
    (Note [Every copy in the report]). A class, not a generator context manager: it is entered
    a few times per call the pass rewrites."""

    __slots__ = ("ctx", "tag", "outer")

    def __init__(self, ctx: Any, kind: CopyKind, call: str = "") -> None:
        self.ctx, self.tag = ctx, (kind, call)

    def __enter__(self) -> None:
        self.outer = getattr(self.ctx, "copying_for", None)
        self.ctx.copying_for = self.tag

    def __exit__(self, *exc: object) -> None:
        self.ctx.copying_for = self.outer


def tag_emitted(ctx: Any, node: fx.Node) -> None:
    """Tag ``node``, just emitted, with what ``ctx`` copies for, if it is a copy."""
    tag = getattr(ctx, "copying_for", None)
    if tag is not None and node.target in COPY_TARGETS:
        node.meta[_TAG] = tag


def tag_new_copies(graph: fx.Graph, before: set[fx.Node], kind: CopyKind) -> None:
    """Tag the untagged copy nodes of ``graph`` that are not in ``before`` (a step that builds
    nodes itself, Note [Every copy in the report])."""
    for n in _copy_nodes(graph):
        if n not in before and _TAG not in n.meta:
            n.meta[_TAG] = (kind, "")


def copy_node_set(graph: fx.Graph) -> set[fx.Node]:
    return set(_copy_nodes(graph))


def tag_write_backs(outputs: Iterable[fx.Node], call: str) -> None:
    """Tag ``WRITE_BACK`` the copies that put the values in ``outputs`` (a call's written
    buffers, before its rewrite) back into memory: scatters and ``copy_`` that take them, or a
    view of them, or such a scatter's result, as their source."""
    todo, seen = list(outputs), set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for u in n.users:
            if u.op != "call_function":
                continue
            if u.target in VIEW_OPS and u.args and u.args[0] is n:
                todo.append(u)
            elif u.target in SCATTER_VIEWS and len(u.args) > 1 and u.args[1] is n:
                u.meta.setdefault(_TAG, (CopyKind.WRITE_BACK, call))
                todo.append(u)
            elif u.target is _aten.copy_.default and len(u.args) > 1 and u.args[1] is n:
                u.meta.setdefault(_TAG, (CopyKind.WRITE_BACK, call))


def account_copies(graph: fx.Graph) -> list[Copy]:
    """Every copy node of ``graph``, in graph order, with what it is for (Note [Every copy in
    the report]); untagged nodes get their kind (and keep it, for a later count)."""
    nodes = _copy_nodes(graph)
    for n in nodes:  # copy_ and scatters first: a clone Inductor made takes its copy_'s kind
        if _TAG not in n.meta and n.target is not _aten.clone.default:
            n.meta[_TAG] = _kind_from_source(n)
    for n in nodes:
        if _TAG not in n.meta:
            n.meta[_TAG] = _kind_from_destination(n)
    out = []
    for n in nodes:
        kind, call = n.meta[_TAG]
        if n.target in SCATTER_VIEWS and len(n.args) > 1 and isinstance(n.args[1], fx.Node):
            if kind is not CopyKind.OTHER:
                n.args[1].meta[_SCATTERS_FROM] = (kind, call)
        out.append(Copy(n.name, kind, call, copy_nbytes(n)))
    return out


_OTHER = (CopyKind.OTHER, "")


def _kind_from_source(node: fx.Node) -> tuple[CopyKind, str]:
    """A ``copy_`` or scatter nobody tagged (one Inductor made from a tagged scatter): the kind
    of the scatter whose source it copies, or of the tagged copy it copies."""
    for src in view_walk(node.args[1] if len(node.args) > 1 else None):
        if _SCATTERS_FROM in src.meta:
            return src.meta[_SCATTERS_FROM]
        tag = src.meta.get(_TAG)
        if tag is not None and tag[0] is not CopyKind.OTHER and src.target in SCATTER_VIEWS:
            return tag
    return _OTHER


def _kind_from_destination(clone: fx.Node) -> tuple[CopyKind, str]:
    """A clone nobody tagged: the kind of a tagged ``copy_`` into it (or into a view of it),
    which is how Inductor decomposes a scatter; else ``OTHER``."""
    found = users_through_views(clone)
    into = {clone, *(u for u in found if u.op == "call_function" and u.target in VIEW_OPS)}
    for u in found:
        if u.target is _aten.copy_.default and u.args and u.args[0] in into:
            tag = u.meta.get(_TAG)
            if tag is not None and tag[0] is not CopyKind.OTHER:
                return tag
    return _OTHER

"""PyTorch's own functional nodes around a custom op, decided by autofunc's pass (opt-in).

A mutable custom op autofunc does not own (not registered) reaches the functional graph as
PyTorch's ``auto_functionalized`` (v1) or ``auto_functionalized_v2`` (v2) node; Inductor's own
re-inplacing then decides its copies. A stack that keeps PyTorch's functionalization (vLLM,
whose fusion passes match PyTorch's v1 nodes) gets autofunc's rules for them without
registering any op by switching these adapters on (``autofunc.reinplace_pytorch_nodes()``):
the pass reads each node as a :class:`~autofunc.hops.adapter.Mutation` and rewrites it like
its own HOPs, before Inductor's re-inplacing would see it. What PyTorch's code decides is never
consulted: only the node's documented contract is read.

Note [PyTorch's nodes as mutations]
* v1, ``auto_functionalized(op, **kwargs)``: clones every mutable argument, runs ``op`` on the
  clones and returns ``(out, *new)`` (``out`` the op's value, ``None`` for an op returning
  nothing; several outputs are spread) with one entry per mutable argument in schema order
  (``None`` for an absent optional). So each mutable tensor is a buffer of its own, taken
  whole; its key is the number of op outputs (at least one) plus its argument's position.
  A list argument's entry is a list (no ``getitem`` of the node holds one buffer): such
  nodes, and nodes Inductor has already annotated (``_only_clone_these_tensors``), stay
  PyTorch's.
* v2, ``auto_functionalized_v2(op, **kwargs, _all_bases=...)``: clones the bases, regenerates
  each written argument from its view entries (``v2_entries.py``) and returns the op's outputs
  then the new bases; the same entries as a region's (``subgraph.py``), read the same way.
  ``out=`` ops (whose node returns the op's outputs only) and nodes with
  ``_only_clone_these_bases`` stay PyTorch's.
* An op that returns its mutable arguments (tagged ``inplace``/``out``) stays PyTorch's under
  both: the node's outputs are then those arguments, in PyTorch's own arrangement.
* PyTorch's v1 node itself is wrong where two mutable arguments share memory or one is an
  ``unfold`` view (each is cloned alone); reading it faithfully keeps that result, as PyTorch's
  re-inplacing does (the corpus' ``same_twice``, ``two_overlapping``, ``unfold_gaps``).
The op is called directly on the buffers or their copies, as for autofunc's own HOPs; its
schema tells Inductor what it writes. An op whose schema autofunc does not support
(``schema.op_info`` refuses it) stays PyTorch's, and a node read in an unknown encoding too,
with a debug log saying why.

Imports ``adapter``, ``v1`` (the mutable slots of a call), ``v2_entries``, ``views`` and
``schema`` only (and PyTorch's HOP objects).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch._ops import OpOverload

from .. import views
from ..errors import AutofuncError, UnsupportedCallError
from ..schema import op_info, qualname
from .adapter import Mutation, Slot, register_adapter, registered, unregister_adapter
from .common import traced_kwargs
from .v1 import mutable_slots
from .v2_entries import TracedBases, read_slots
from ..logs import get_logger

__all__ = ["PyTorchCall", "PyTorchV1Adapter", "PyTorchV2Adapter", "enable", "enabled"]

log = get_logger("autofunc.reinplace")

_V1 = torch.ops.higher_order.auto_functionalized
_V2 = torch.ops.higher_order.auto_functionalized_v2


def _leave(node: Any, why: str) -> bool:
    log.debug("%s: left to PyTorch (%s)", node, why)
    return False


def _plain_op(node: Any) -> OpOverload | None:
    op = node.args[0] if node.args else None
    return op if isinstance(op, OpOverload) else None


def _info(op: OpOverload) -> Any:
    info = op_info(op)
    if info.returned_args:
        raise ValueError("an op that returns its mutable arguments")
    return info


def _read_or_leave(adapter: Any, node: Any) -> Mutation | bool:
    """``adapter.read(node)``, or ``False`` (left to PyTorch, logged) where the node is not
    readable; a call no compiled form of which matches eager still raises."""
    try:
        return adapter.read(node)
    except UnsupportedCallError:
        raise
    except (AutofuncError, TypeError, ValueError, KeyError) as e:
        return _leave(node, str(e))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PyTorchCall(Mutation):
    """A PyTorch node around a custom op as the pass sees it (Note [The adapter seam] in
    hops/adapter.py): a custom op call whose outputs hold the new buffers at PyTorch's
    positions (Note [PyTorch's nodes as mutations])."""

    keys: tuple[int, ...]  # per buffer, the output holding its new value

    def output_keys(self, i: int) -> tuple[int, ...]:
        return (self.keys[i],)


def _outputs_before_buffers(node: Any, num_buffers: int) -> int:
    val = node.meta.get("val")
    if not isinstance(val, (tuple, list)) or len(val) < num_buffers:
        raise ValueError("the node's value does not hold its new buffers")
    return len(val) - num_buffers


class PyTorchV1Adapter:
    """Reads PyTorch's ``auto_functionalized`` around an op (Note [PyTorch's nodes as
    mutations])."""

    strategy = "pytorch_v1"

    def accepts(self, node: Any) -> Mutation | bool:
        op = _plain_op(node)
        if op is None:
            return _leave(node, "not around an OpOverload")
        if "_only_clone_these_tensors" in node.kwargs:
            return _leave(node, "already annotated by Inductor")
        return _read_or_leave(self, node)

    def read(self, node: Any) -> Mutation:
        op = _plain_op(node)
        info = _info(op)
        if any(a.kind.is_list for a in info.mutable_args):
            raise ValueError("a mutable list argument (its new values are one list output)")
        n = _outputs_before_buffers(node, len(info.mutable_args))
        kwargs = {a.name: node.kwargs.get(a.name, a.default_value) for a in op._schema.arguments}
        found = mutable_slots(info, kwargs)
        position = {a.name: k for k, a in enumerate(info.mutable_args)}
        for arg in info.mutable_args:
            kwargs[arg.name] = None
        slots = tuple(Slot(name, None, k, views.ViewChain()) for k, (name, _, _) in enumerate(found))
        return PyTorchCall(
            info,
            self.strategy,
            tuple(t for _, _, t in found),
            slots,
            kwargs,
            keys=tuple(n + position[name] for name, _, _ in found),
            traced=traced_kwargs(node),
        )


class PyTorchV2Adapter:
    """Reads PyTorch's ``auto_functionalized_v2`` around an op (Note [PyTorch's nodes as
    mutations]); a node around a higher-order op is the regions adapter's."""

    strategy = "pytorch_v2"

    def accepts(self, node: Any) -> Mutation | bool:
        op = _plain_op(node)
        if op is None:
            return False  # a region (subgraph.py), or no op at all
        if "_only_clone_these_bases" in node.kwargs:
            return _leave(node, "already annotated by Inductor")
        if torch._library.utils.is_out(op):
            return _leave(node, "an out= op (its node returns the op's outputs only)")
        return _read_or_leave(self, node)

    def read(self, node: Any) -> Mutation:
        op = _plain_op(node)
        info = _info(op)
        kwargs = dict(node.kwargs)
        bases = tuple(kwargs.pop("_all_bases"))
        n = _outputs_before_buffers(node, len(bases))
        traced = TracedBases(node, tuple(node.meta["val"][n:]), n)
        name = qualname(op)
        slots = read_slots(kwargs, list(info.mutable_names), traced, name)
        for a in op._schema.arguments:
            kwargs.setdefault(a.name, a.default_value)
        return PyTorchCall(
            info,
            self.strategy,
            bases,
            tuple(slots),
            kwargs,
            keys=tuple(n + i for i in range(len(bases))),
            traced=traced_kwargs(node),
        )


def enable(on: bool = True) -> None:
    """Let the re-inplace pass decide PyTorch's ``auto_functionalized``/``_v2`` nodes around an
    op (``on``), or leave them to Inductor's own re-inplacing (the default)."""
    if on:
        register_adapter(_V1, PyTorchV1Adapter())
        register_adapter(_V2, PyTorchV2Adapter())
    else:
        unregister_adapter(_V1, PyTorchV1Adapter)
        unregister_adapter(_V2, PyTorchV2Adapter)


def enabled() -> bool:
    return registered(_V1, PyTorchV1Adapter)

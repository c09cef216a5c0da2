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
backends/inductor/ops.py). Nodes around an ``OpOverload`` (PyTorch's handling of an op autofunc
does not own) are not this adapter's (``accepts``): they stay PyTorch's, as the baseline.

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

import dataclasses
from typing import Any, ClassVar

import torch
from torch._ops import HigherOrderOperator
from torch.utils import _pytree as pytree

from ..errors import UnsupportedCallError
from .adapter import DirectCall, Mutation, register_adapter, registered, unregister_adapter
from .v2_entries import TracedBases, read_slots
from ..logs import get_logger

__all__ = ["RegionCall", "SubgraphAdapter", "enable", "enabled"]

log = get_logger("autofunc.reinplace")

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
        originals = TracedBases(node, tuple(hop_val[n:]), n)
        written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        slots = read_slots(kwargs, written, originals, name)
        return RegionCall(
            None,
            self.strategy,
            bases,
            tuple(slots),
            kwargs,
            hop=hop,
            name=name,
            schema=schema,
            num_outputs=n,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegionCall(Mutation):
    """A region call as the pass sees it (Note [The adapter seam] in hops/adapter.py): its
    direct call is the higher-order op itself, returning its ``num_outputs`` outputs as one
    tuple, with every buffer's write declared around it (the backend does not see what a
    region writes) and no layout fixed for its operands."""

    fixes_layouts: ClassVar[bool] = False  # Note [Region operands keep no computed layout]
    returns_tuple: ClassVar[bool] = True
    eager_input_vals: ClassVar[bool] = False

    hop: HigherOrderOperator
    name: str  # what reports call it: ``invoke_subgraph:<identifier>``
    schema: Any  # the region's ``torch.FunctionSchema``
    num_outputs: int  # the region's outputs, before the new bases

    @property
    def op_name(self) -> str:
        return self.name

    def output_keys(self, i: int) -> tuple[int, ...]:
        return (self.num_outputs + i,)

    def direct_call(self, args: list[Any]) -> DirectCall:
        full = self.call_kwargs(args)
        missing = [a.name for a in self.schema.arguments if a.name not in full]
        if missing:
            raise ValueError(f"no value for {missing}")
        positional = tuple(full.pop(a.name) for a in self.schema.arguments if not a.kwarg_only)
        return DirectCall(self.hop, positional, full, self.num_outputs)

    def direct_value(self, hop_val: Any, n: int) -> Any:
        return None if hop_val is None else tuple(hop_val[:n])

    def declared_writes(self, buffers: list[Any]) -> list[Any]:
        return list(buffers)


# Note [Region operands keep no computed layout]
# A custom op given a buffer Inductor computes fixes that buffer's layout to the strides the
# graph records (its eager values). A region does not: after autofunc's pass, PyTorch's
# post-grad passes re-derive the fake values of the graph (``FakeTensorUpdater``), and a
# computed buffer whose recorded strides its op does not produce (``slice_scatter`` of a
# strided input: recorded with the input's stride 2, re-derived contiguous) then reaches the
# region with other strides than its other calls, which Inductor refuses ("subgraph args must
# have consistent values", fuzz seed 20261261 #242; PyTorch's own handling gives a wrong result
# there). So a non-contiguous computed buffer of a region call is copied into a fixed layout,
# like any such buffer taken other than whole (the rule "a layout the backend chooses", Note [Layouts
# Inductor chooses]), and every buffer of a region call gets a fixed layout: an ``as_strided``
# alias when written in place, a span copy when cloned (Note [Clones for Inductor]). A plain
# ``empty_strided`` + ``copy_`` clone is not fixed (Inductor turns the copy into a computed
# buffer of its own layout), and ``invoke_subgraph`` copies an operand whose layout differs from
# its recorded strides: the region then writes that copy (seen on #242 once the first fix was
# in).


def _schema(node: Any) -> Any:
    """The HOP's schema, from the ``get_attr`` of its pytree spec."""
    spec = node.kwargs["_op_schema"]
    if isinstance(spec, torch.fx.Node):
        spec = getattr(node.graph.owning_module, spec.target)
    return pytree.tree_unflatten([], spec).schema


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

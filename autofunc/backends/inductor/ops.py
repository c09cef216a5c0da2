"""The two ops Inductor's policy has the pass emit (``InductorPolicy.alias`` and
``InductorPolicy.declare_writes`` in ``policy.py``): ``autofunc::fresh_alias`` and
``autofunc::written``. Defined here, with the Inductor knowledge, not by the emitter: under
:data:`~autofunc.passes.policy.GENERIC` the pass emits ``aten.alias`` and declares nothing.
Importing this module defines them (``repairs`` does, and every graph Inductor
compiles with them has imported it). ``extern_kernel`` says which nodes Inductor calls as
extern kernels of ops of their own, these among them.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

__all__ = ["FRESH_ALIAS", "WRITTEN", "extern_kernel"]

_aten = torch.ops.aten

# Note [A fresh alias Inductor keeps]
# Inductor lowers ``aten.alias`` (and any view with its buffer's own layout) to the buffer
# itself, so generated code would pass one tensor object where eager passes two aliases of one
# storage (Note [Arguments keep their identity] in hops/common.py). ``autofunc::fresh_alias`` is an
# opaque op with an aliasing schema: Inductor calls it as an extern kernel and passes its
# result, a new tensor object over the same memory. Only the second and later identical
# arguments of a call use it; the first is the buffer itself, so Inductor still sees the op
# mutate that buffer and orders later reads after the call.
_lib = torch.library.Library("autofunc", "DEF")
_lib.define("fresh_alias(Tensor(a) x) -> Tensor(a)")
for _key in ("CompositeExplicitAutograd", "Meta"):
    _lib.impl("fresh_alias", lambda x: _aten.alias.default(x), _key)
FRESH_ALIAS = torch.ops.autofunc.fresh_alias.default

# Note [A dtype view Inductor keeps]
# Inductor lowers ``aten.view.dtype`` to another element size of a tensor that is not
# contiguous (a strided graph input ``b[::2]`` read as ``int32``) by copying the tensor into a
# contiguous buffer first: a view of a copy. A read-only argument regenerated over the memory
# the call writes (Note [Read arguments see the written memory] in hops/v2.py) must be a view of
# that memory, or the op reads the old values where eager reads what it wrote (fuzz seed
# 20261601 #11: ``mlate(b, b.view(torch.int32))``; PyTorch's built-in is wrong the same way).
# ``autofunc::dtype_view`` is an opaque op with an aliasing schema: Inductor calls it as an
# extern kernel on the tensor as it is and passes on its result, a view of the same memory.
# Read-only arguments only: a written one stays ``aten.view.dtype``, through which Inductor
# sees the write. And only to another element size: to the same one Inductor lowers the view to
# a view of the memory whatever its strides (its ``DtypeView``), with no extern kernel, whose
# output Inductor's memory planner would count as a buffer of its own (fuzz seed 20261801 #80:
# ``m2(r, r, r.view(torch.int64))`` on float64, 8 B over PyTorch's built-in).
_lib.define("dtype_view(Tensor(a) x, ScalarType dtype) -> Tensor(a)")
for _key in ("CompositeExplicitAutograd", "Meta"):
    _lib.impl("dtype_view", lambda x, dtype: _aten.view.dtype(x, dtype), _key)
DTYPE_VIEW = torch.ops.autofunc.dtype_view.default

# Note [Writes Inductor cannot see]
# Inductor lowers ``invoke_subgraph`` (a ``nested_compile_region``) to an extern call that only
# *reads* its operands: nothing tells the scheduler that the region writes some of them, so it
# may move a read of the old value after the call, or a read of the new value (the epilogue's
# copy-back) before it. PyTorch's own decomposition of ``auto_functionalized_v2`` around
# ``invoke_subgraph`` is wrong that way (its copy-back of a cloned cache ran before the region).
# ``autofunc::written(Tensor(a!)[] xs, Tensor[] after)`` does nothing at run time and declares
# a write of ``xs``: emitted just before such a call and just after it, on the buffers the call
# writes, it makes Inductor order every earlier read of them before the call (reads of the old
# value run before a mutation) and every later read after it (they read the mutated buffer).
# The one after the call also takes the call's outputs (``after``): Inductor drops an
# ``invoke_subgraph`` whose outputs nothing uses, writes and all (fuzz seed 20261259 #32:
# ``g = region(b, r)`` with ``g`` unused left ``b`` unwritten, with PyTorch's handling too).
_lib.define("written(Tensor(a!)[] xs, Tensor[] after) -> ()")
for _key in ("CompositeExplicitAutograd", "Meta"):
    _lib.impl("written", lambda xs, after: None, _key)
WRITTEN = torch.ops.autofunc.written.default


def extern_kernel(node: Any) -> bool:
    """Whether Inductor calls ``node`` as an extern kernel of an op of its own: a custom op, a
    HOP, the ops above (neither ATen nor prims, nor ``getitem`` of such a call's tuple). It
    computes what such a call takes into buffers of their own, where it lowers the call."""
    target = node.target
    return (
        node.op == "call_function"
        and target is not operator.getitem
        and getattr(target, "namespace", None) not in ("aten", "prims")
    )

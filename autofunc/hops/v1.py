"""autofunc's v1 strategy: clone every mutable argument.

Owns the ``autofunc_v1`` HOP and the functionalization of one op call into it. Imports
``hops.common`` and ``schema``; never ``hops.v2``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

from .. import views
from ..schema import OpInfo, resolve, op_info
from .adapter import Mutation, Slot, register_adapter, slot_label
from .common import (
    AutofuncHOP,
    call_result,
    clone_exact,
    normalize_args,
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

__all__ = [
    "auto_functionalized_v1",
    "autofunc_v1_autograd",
    "autofunc_v1_dense",
    "autofunc_v1_fake",
    "autofunc_v1_functionalize",
    "autofunc_v1_proxy",
    "functionalize_v1",
    "inexact_slot",
    "mutable_slots",
]


class AutoFunctionalizedV1(AutofuncHOP):
    """``autofunc_v1(_op: str, **op_kwargs) -> (*op_outputs, *new_values)``

    Semantics, as plain Python::

        op = resolve(_op)
        new = {name: clone_exact(op_kwargs[name]) for each mutable argument}  # lists elementwise
        out = op(**{**op_kwargs, **new})
        return (*out, *new.values())   # one entry per mutable tensor, lists flattened, None skipped

    ``op_kwargs`` holds every argument of the op by its schema name. The HOP never writes its
    inputs; the functional program replaces each mutated argument by its new value.
    """


auto_functionalized_v1 = AutoFunctionalizedV1("autofunc_v1")
auto_functionalized_v1.__module__ = "torch.ops.higher_order"


def mutable_slots(info: OpInfo, kwargs: dict[str, Any]) -> list[tuple[str, int | None, Any]]:
    """``(arg name, list index or None, value)`` for each mutable tensor of a call, in output order."""
    slots = []
    for arg in info.mutable_args:
        value = kwargs[arg.name]
        if value is None:
            continue
        if arg.kind.is_list:
            slots.extend((arg.name, i, t) for i, t in enumerate(value) if t is not None)
        else:
            slots.append((arg.name, None, value))
    return slots


def inexact_slot(info: OpInfo, kwargs: dict[str, Any]) -> str | None:
    """The first mutable argument (``name`` or ``name[i]``) that functionalization would write
    back wrongly (``common.written_back_inexactly``, Note [Writing back unfold views]), or
    ``None``. The registry functionalizes such a call with v2."""
    for name, index, t in mutable_slots(info, kwargs):
        if written_back_inexactly(t):
            return slot_label(name, index)
    return None


def autofunc_v1_dense(_op: str, **kwargs: Any) -> tuple:
    info = op_info(resolve(_op))
    new_kwargs = dict(kwargs)
    new_values = []
    for k, (name, index, value) in enumerate(mutable_slots(info, kwargs)):
        new = clone_exact(value)
        new_values.append(new)
        if index is None:
            new_kwargs[name] = new
        else:
            if new_kwargs[name] is kwargs[name]:
                new_kwargs[name] = list(kwargs[name])
            new_kwargs[name][index] = new
    out = info.op(**new_kwargs)
    return (*op_outputs(info, out), *new_values)


def functionalize_v1(ctx: Any, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Functionalize one call of ``op`` (under ``ctx``, a functionalization API) with v1.

    The caller must have checked that no two mutable tensors of the call may overlap: cloning
    them separately would break the aliasing the op sees in eager (Note [v1 and aliased args]).
    """
    info = op_info(op)
    kw = normalize_args(op, args, kwargs)
    unwrapped = ctx.unwrap_tensors(kw)
    with ctx.redispatch_to_next():
        flat = auto_functionalized_v1(info.qualname, **unwrapped)
    outs, new_values = flat[: info.num_returns], flat[info.num_returns :]
    for (_, _, old), new in zip(mutable_slots(info, kw), new_values, strict=True):
        write_back(ctx, old, new)
    return call_result(ctx, info, outs, kw)


class V1Adapter:
    """Reads an ``autofunc_v1`` call for the re-inplace pass: one buffer per mutable tensor,
    which the op receives as it is (``hops.adapter``)."""

    strategy = "v1"

    def read(self, node: Any) -> Mutation:
        info = op_info(resolve(node.args[0]))
        kwargs = dict(node.kwargs)
        for arg in info.mutable_args:
            value = kwargs[arg.name]
            kwargs[arg.name] = [None] * len(value) if isinstance(value, (list, tuple)) else None
        found = mutable_slots(info, node.kwargs)
        slots = tuple(Slot(name, i, k, views.ViewChain()) for k, (name, i, _) in enumerate(found))
        buffers = tuple(t for _, _, t in found)
        traced = traced_kwargs(node)
        return Mutation(info, self.strategy, buffers, slots, kwargs, traced=traced)


# -- the rules of ``autofunc_v1`` (the shared bodies: hops/common.py) -------------------------


def autofunc_v1_fake(mode: FakeTensorMode, _op: str, **kwargs: Any) -> tuple:
    return run_fake(mode, autofunc_v1_dense, _op, kwargs)


def autofunc_v1_proxy(mode: ProxyTorchDispatchMode, _op: str, **kwargs: Any) -> tuple:
    return trace_call(mode, auto_functionalized_v1, _op, kwargs)


def autofunc_v1_functionalize(ctx: Any, _op: str, **kwargs: Any) -> tuple:
    return functionalize_call(ctx, auto_functionalized_v1, _op, kwargs)


def autofunc_v1_autograd(_op: str, **kwargs: Any) -> tuple:
    return below_autograd(auto_functionalized_v1, _op, kwargs)


# -- registration -----------------------------------------------------------------------------

register_rules(
    auto_functionalized_v1,
    dense=autofunc_v1_dense,
    fake=autofunc_v1_fake,
    proxy=autofunc_v1_proxy,
    functionalize=autofunc_v1_functionalize,
    autograd=autofunc_v1_autograd,
)
register_adapter(auto_functionalized_v1, V1Adapter())

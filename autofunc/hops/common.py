"""Plumbing shared by the v1 and v2 HOPs.

Owns: the HOP base class, argument normalisation (schema order -> keyword dict), the exact clone
used for mutable arguments and bases, the generic proxy / fake / functionalize / autograd rules
(and Dynamo's leave to record the HOPs), and the write-back of new values into a functional
program. Imports views and schema only.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator, OpOverload
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import (
    ProxyTorchDispatchMode,
    disable_proxy_modes_tracing,
    track_tensor_tree,
)

from ..compiler_imports import import_compiler
from ..regions import overlaps, region_of_storage, tensors_may_overlap
from ..schema import OpInfo
from ..symbolic import contiguous_or_false, copy_extent, known

__all__ = [
    "AutofuncHOP",
    "Distinct",
    "TRACED_KWARGS",
    "traced_kwargs",
    "clone_exact",
    "geometry_known",
    "get_base",
    "may_overlap",
    "same_memory",
    "same_storage",
    "normalize_args",
    "call_result",
    "op_outputs",
    "unpack_outputs",
    "below_autograd",
    "functionalize_call",
    "register_rules",
    "run_fake",
    "trace_call",
    "write_back",
]


class AutofuncHOP(HigherOrderOperator):
    """A HOP whose first argument is the mutable op's qualified name (a ``str``).

    Note [Why the op travels by name]
    PyTorch's proxy tracer refuses a third-party HOP that takes an ``OpOverload`` whose layout tag
    is ``needs_exact_strides`` (the default for custom ops): it would have to record eager input
    strides for it. Passing the op's name keeps the graph printable, hashable and cacheable. The
    exact strides are still honoured: the HOP regenerates arguments with exactly the traced
    (size, stride, offset), and when the pass turns the HOP into a direct op call it records
    ``eager_input_vals`` on that call, which Inductor uses to constrain layouts.
    """

    def __init__(self, name: str):
        super().__init__(name, cacheable=True)

    def __call__(self, /, _op: str, **kwargs: Any):
        if not isinstance(_op, str):
            raise AssertionError(f"{self.name()} expects the op's qualified name, got {_op!r}")
        return super().__call__(_op, **kwargs)


def normalize_args(op: OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    """All of a call's arguments as one ``{schema name: value}`` dict, defaults filled in."""
    out = {}
    for i, arg in enumerate(op._schema.arguments):
        if arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif not arg.kwarg_only and i < len(args):
            out[arg.name] = args[i]
        else:
            out[arg.name] = arg.default_value
    return out


def clone_exact(t: torch.Tensor) -> torch.Tensor:
    """A fresh copy of ``t`` with exactly its size and stride (its storage offset becomes 0).

    Custom ops default to ``needs_exact_strides``, so a clone handed to one must have the strides
    eager would pass. Unlike a storage-level clone it copies only the elements ``t`` covers (for
    an overlapping or gappy ``t``, the storage span between its first and last element). When
    contiguity cannot be decided without a guard (unbacked sizes), the span copy is taken: it
    is exact either way (Note [Undecided geometry]).
    """
    if contiguous_or_false(t):
        return t.clone()
    extent = copy_extent(t.shape, t.stride())
    span = t.as_strided((extent,), (1,), t.storage_offset()).clone()
    return span.as_strided(t.shape, t.stride(), 0)


def get_base(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage ``t`` views: its autograd base, else itself.

    Note [Bases in inference mode]
    Under inference mode tensors do not record their base. FunctionalTensorMode then tracks one
    base per functional storage (``_inference_mode_base``) when it is configured to; when it is
    not (and under ``torch.func.functionalize``), ``t`` is treated as its own base, which is
    sound (the view is cloned and the functional program writes it back) but may cost a copy
    the pass reports. When two mutable arguments then share a storage without a known common
    base, v2 synthesizes one (see ``hops.v2._Bases``).
    """
    base = t._base
    if base is None and torch.is_inference_mode_enabled():
        base = getattr(t, "_inference_mode_base", None)
    return t if base is None else base


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two (functional) tensors view one storage; ``True`` when it cannot be told."""
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return True


def geometry_known(ctx: Any) -> bool:
    """Whether tensors under ``ctx`` report their real view geometry.

    Under ``torch.func.functionalize`` (the C++ functionalization) a view reports the geometry of
    its functional copy (offset 0, contiguous), so storage offsets cannot tell views apart.
    """
    from torch._subclasses.functional_tensor import PythonFunctionalizeAPI

    return isinstance(ctx, PythonFunctionalizeAPI)


def may_overlap(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two mutable tensors of one functional call may share memory (conservative).

    Geometry is read off the tensors' current values (``ctx.unwrap_tensors``), not off the
    functional wrappers: a base whose value was replaced (by an in-place op or an earlier call)
    keeps its old size/stride/offset, while views taken since describe the new value.
    """
    trust_geometry = geometry_known(ctx)
    base = get_base(a)
    if base is get_base(b) and trust_geometry:
        ia, ib, ibase = ctx.unwrap_tensors((a, b, base))
        return tensors_may_overlap(ia, ib, ibase)
    # Different bases, or unknown ones (Note [Bases in inference mode]): only the storage tells.
    if not same_storage(a, b):
        return False
    if not trust_geometry:
        return True
    ia, ib = ctx.unwrap_tensors((a, b))
    return overlaps(region_of_storage(ia), region_of_storage(ib))


def same_memory(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one functional call are exactly one memory: one storage, and
    equal storage offset, sizes, strides and dtype, each provably so without a guard. ``False``
    when that cannot be told (geometry unknown under ``ctx``, symbolic values that may differ).
    Geometry is read off the current values, as in :func:`may_overlap`.

    Note [A read argument over exactly the written memory]
    A read-only argument the op receives as the memory of a mutable argument (Note [Read
    arguments eager aliases] in hops/v2.py) is one that eager passed as that very object, or
    as a tensor for which this function holds. Reasons for each condition:

    * *Exactly the memory*: equal storage, offset, sizes, strides and dtype mean equal
      elements, so the regenerated mutable tensor is the read argument, element for element,
      whatever the view chains that made either. A read that merely overlaps a written
      argument, or covers its memory with other strides, another shape or another dtype, is
      no alias of it: handing it the written tensor would change what it reads. It is
      regenerated from the written base with its own chain instead (Note [Read arguments see
      the written memory] in hops/v2.py).
    * *Decided at trace time*, on eager's views (storage and geometry of the fake values): the
      pass never merges a read with a write, so ``op(dst=x, src=x.clone())`` after Inductor
      drops the clone stays a read of its own copy (the PR #198260 trap).
    * *Provably, without a guard*: symbolic geometry that is equal only for some sizes is not
      equal (autofunc never specializes a graph); the call then keeps today's copy. Under
      ``torch.func.functionalize`` views report no real geometry (``geometry_known``): only
      identity counts there.
    """
    if a is b:
        return True
    if a.dtype != b.dtype or not geometry_known(ctx):
        return False
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        if StorageWeakRef(a.untyped_storage()) != StorageWeakRef(b.untyped_storage()):
            return False
    except (RuntimeError, NotImplementedError):
        return False
    ia, ib = ctx.unwrap_tensors((a, b))
    if ia.dim() != ib.dim():
        return False
    pairs = [(ia.storage_offset(), ib.storage_offset())]
    pairs += [*zip(ia.shape, ib.shape), *zip(ia.stride(), ib.stride())]
    return all(known(x == y) for x, y in pairs)


def op_outputs(info: OpInfo, out: Any) -> tuple:
    """The op's return value as a tuple of ``info.num_returns`` entries."""
    if info.num_returns == 0:
        return ()
    if info.num_returns == 1:
        return (out,)
    return tuple(out)


def call_result(ctx: Any, info: OpInfo, outs: tuple, kwargs: dict[str, Any]) -> Any:
    """What a functionalized call returns: the op's fresh outputs, wrapped, or, for an op that
    returns its mutable arguments, those argument objects from ``kwargs`` (Note [Ops that
    return their arguments] in ``schema``)."""
    if info.returned_args:
        returned = tuple(kwargs[name] for name in info.returned_args)
        return returned[0] if len(returned) == 1 else returned
    return ctx.wrap_tensors(unpack_outputs(info, outs))


def unpack_outputs(info: OpInfo, flat: tuple) -> Any:
    """Inverse of :func:`op_outputs`: what the op itself would have returned."""
    if info.num_returns == 0:
        return None
    if info.num_returns == 1:
        return flat[0]
    return tuple(flat)


# Views whose inverse in PyTorch's functionalization is not a scatter of the view into its
# base: ``unfold``'s (``unfold_backward``) rebuilds the base from the windows alone.
_INEXACT_INVERSES = frozenset({"unfold_ViewMeta"})


def written_back_inexactly(t: torch.Tensor) -> bool:
    """Whether functionalization would write a new value of ``t`` back into its base wrongly.

    Note [Writing back unfold views]
    ``write_back`` replaces a functional tensor's value and lets functionalization carry the
    new value into the tensor's base by inverting the views that made it. For a view made by
    ``unfold`` that inverse rebuilds the whole base from the windows: the elements no window
    covers become 0 and overlapping windows are summed (pytorch#198102; PyTorch's built-in v1
    gives the same wrong result). A v1 call with such an argument is therefore functionalized
    with v2, which writes back the argument's base (``registry``); where v2's base is itself
    such a view (its real base unknown: ``torch.func.functionalize``, inference mode without
    base tracking) the call is refused (``UnsupportedCallError``). The views a tensor was made
    by are read off its functional wrapper; where they cannot be read, ``False``.
    """
    getter = getattr(torch._C._functionalization, "get_view_meta_sequence", None)
    if getter is None:  # pragma: no cover - a torch without it
        return False
    try:
        metas = getter(getattr(t, "elem", t))  # a FunctionalTensor's functional wrapper
    except (RuntimeError, TypeError):
        return False
    return any(type(m).__name__ in _INEXACT_INVERSES for m in metas)


def write_back(ctx: Any, old: torch.Tensor, new: torch.Tensor) -> None:
    """Make the functional program see ``new`` wherever it later reads ``old`` (or an alias)."""
    ctx.replace(old, new)
    ctx.commit_update(old)
    ctx.sync(old)


# -- the rules every autofunc HOP shares ------------------------------------------------------
# Each HOP module defines its rules at module level, named ``<hop>_dense``, ``<hop>_fake``,
# ``<hop>_proxy``, ``<hop>_functionalize`` and ``<hop>_autograd`` (``autofunc_v1_fake``, ...),
# each a line calling the shared body below, and registers them in one block at its end with
# :func:`register_rules`.


def run_fake(mode: FakeTensorMode, dense: Callable, _op: str, kwargs: dict[str, Any]) -> Any:
    """The fake rule: the strategy's ``dense`` implementation run under the fake ``mode``, so the
    op's own fake implementation computes the output metadata."""
    with mode:
        return dense(_op, **kwargs)


def trace_call(
    mode: ProxyTorchDispatchMode, hop: AutofuncHOP, _op: str, kwargs: dict[str, Any]
) -> Any:
    """The proxy rule: one ``call_function`` node of ``hop`` in the traced graph, its value
    computed by the HOP with tracing off."""
    with disable_proxy_modes_tracing():
        out = hop(_op, **kwargs)
    proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
    proxy = mode.tracer.create_proxy("call_function", hop, (_op,), proxy_kwargs)
    proxy.node.meta[TRACED_KWARGS] = pytree.tree_map(_traced_value, proxy_kwargs)
    return track_tensor_tree(out, proxy, constant=None, tracer=mode.tracer)


# Note [The strides eager passes]
# Inductor gives a ``needs_exact_strides`` op (every custom op by default) exactly the strides
# of its call's ``eager_input_vals``. The pass makes that call from the HOP after the graph's
# own passes, which may have replaced an argument by another value of other strides:
# Inductor's joint-graph patterns turn ``torch.zeros(5, 3, 4).cumsum(2)`` into an ``expand`` of
# one row (strides ``(0, 0, 1)``), and the op, handed ``(12, 4, 1)`` in eager, got the expanded
# row (fuzz seed 20261906 #53; a kernel that assumes a dense input reads other elements). The
# proxy rule keeps each keyword argument's value as tracing saw it (``node.meta[TRACED_KWARGS]``,
# an fx node's value at that point), and the direct call's ``eager_input_vals`` take a read
# argument's strides from there (``Mutation.traced``, ``with_traced_reads``): where the graph
# now computes other strides, Inductor copies the value into eager's.
TRACED_KWARGS = "autofunc_traced_kwargs"


def _traced_value(x: Any) -> Any:
    return x.node.meta.get("val") if isinstance(x, torch.fx.Proxy) else None


def traced_kwargs(node: Any) -> dict[str, Any]:
    """A node's keyword arguments as tracing saw them (Note [The strides eager passes]): what
    the proxy rule kept for an autofunc HOP, the keyword half of ``eager_input_vals`` for
    PyTorch's own nodes; none where the node recorded neither."""
    kept = node.meta.get(TRACED_KWARGS)
    if kept:
        return kept
    vals = node.meta.get("eager_input_vals")
    if isinstance(vals, tuple) and len(vals) == 2 and isinstance(vals[1], dict):
        return dict(vals[1])
    return {}


def functionalize_call(ctx: Any, hop: AutofuncHOP, _op: str, kwargs: dict[str, Any]) -> Any:
    """The functionalize rule: the HOP is functional already; it runs on the unwrapped values."""
    unwrapped = ctx.unwrap_tensors(kwargs)
    with ctx.redispatch_to_next():
        return ctx.wrap_tensors(hop(_op, **unwrapped))


def below_autograd(hop: AutofuncHOP, _op: str, kwargs: dict[str, Any]) -> Any:
    """The autograd rule.

    Note [HOPs below autograd]
    A registered op is differentiated by its own autograd formula, which runs above
    functionalization; the HOP is emitted underneath it and is never differentiated itself, so
    it runs below autograd (like a fallthrough) and returns plain values.
    """
    with torch._C._AutoDispatchBelowAutograd():
        return hop(_op, **kwargs)


def register_rules(
    hop: AutofuncHOP,
    *,
    dense: Callable,
    fake: Callable,
    proxy: Callable,
    functionalize: Callable,
    autograd: Callable,
) -> None:
    """Register a HOP's rules with its dispatch keys and modes, fall through the per-device
    autograd keys, and let Dynamo record the HOP (Note [Dynamo meets an autofunc HOP])."""
    hop.py_impl(DispatchKey.CompositeExplicitAutograd)(dense)
    hop.py_impl(FakeTensorMode)(fake)
    hop.py_impl(ProxyTorchDispatchMode)(proxy)
    hop.py_functionalize_impl(functionalize)
    hop.py_impl(DispatchKey.Autograd)(autograd)
    hop.fallthrough(DispatchKey.AutogradCPU)
    hop.fallthrough(DispatchKey.AutogradCUDA)
    _not_allowed_yet.append(hop)
    if "torch._dynamo" in sys.modules:  # cheap then; else when first needed
        allow_hops_in_dynamo()


_not_allowed_yet: list[AutofuncHOP] = []


def allow_hops_in_dynamo() -> None:
    """Let Dynamo put autofunc's HOPs into the graphs it traces (Note [Dynamo meets an autofunc
    HOP]); idempotent. Importing Dynamo takes about a second, so this runs when Dynamo is
    already loaded, or from the registry's backend hooks (the first registration, the first
    functionalized call: before any graph can hold a HOP; Note [Inductor imported when first
    needed] in ``autofunc/__init__.py``).

    Note [Dynamo meets an autofunc HOP]
    Dynamo reads an autofunc HOP when it traces code that calls one: the graph of
    ``torch.export.export(...).module()``, or the backward graph compiled autograd re-traces
    (where selective checkpointing recomputes the HOP). Dynamo only knows PyTorch's own HOPs
    (a private name -> VariableTracker table) and refuses others ("unsupported
    HigherOrderOperator"). Nothing has to be traced *inside* the HOP: it is functional (it
    never writes its inputs) and its arguments are a ``str``, tensors, lists of tensors and
    ints, so recording the call as it is, with its output computed by the fake rule, is all
    Dynamo must do. ``torch.compiler.allow_in_graph`` (public since torch 2.1) does exactly
    that: Dynamo consults it before its HOP table. AOTAutograd then meets the HOP again and
    runs the functionalize/proxy rules above, so the compiled graph holds the HOP as if
    autofunc had emitted it, and the re-inplace pass handles it as usual.
    """
    import_compiler()  # Note [Importing the compiler beside a first compile]
    while _not_allowed_yet:
        torch.compiler.allow_in_graph(_not_allowed_yet.pop())


class Distinct:
    """Hands out each regenerated argument as an object of its own.

    Note [Arguments keep their identity]
    Two mutable arguments regenerated by the identity chain from one base (``op(x.alias(), x)``)
    would be one object, where eager passes two. The second and later uses get a fresh alias
    (``make_alias``), as PyTorch's built-in HOP does for every alias: distinct objects over one
    storage. ``op(x, x)``, one object twice in eager, gets one object twice: v2's wire names
    the tensors eager passed as one object (``_same``), and the HOP and the pass's direct call
    hand over the earlier one again without asking this class (under Inductor a fresh alias is
    an extern kernel of its own, which changes how Inductor reuses buffers: up to 16 bytes more
    than PyTorch's built-in on random programs). ``key`` gives an object's identity: ``id`` for
    tensors, the node itself for FX nodes. Under Inductor the pass makes the alias with an op of
    its own (Note [A fresh alias Inductor keeps] in backends/inductor/ops.py).
    """

    def __init__(self, make_alias: Any, key: Any) -> None:
        self._make_alias = make_alias
        self._key = key
        self._seen: set = set()

    def __call__(self, t: Any) -> Any:
        if self._key(t) in self._seen:
            t = self._make_alias(t)
        self._seen.add(self._key(t))
        return t

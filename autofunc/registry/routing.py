"""Routing a registered op's functionalization to autofunc's HOPs.

Owns the process's :class:`RegistryState` (``registry_state``) and what reads it on every call: the rule
installed with ``torch.library.register_torch_dispatch(op, FunctionalTensorMode, rule)``, the
public hook that ``torch.compile``, ``torch.export`` and ``make_fx`` under functionalization all
go through; the op's ``Functionalize``-key kernel (C++ functionalization); the choice of v1 or v2
for each call; and the backend hooks. Imports the HOPs, ``guards`` and ``state``; never ``api``
and no backend.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload
from torch._subclasses.functional_tensor import FunctionalTensorMode, PythonFunctionalizeAPI

from .. import guards
from ..errors import AutofuncError
from ..hops.common import may_overlap, normalize_args
from ..hops.v1 import functionalize_v1, inexact_slot, mutable_slots
from ..hops.v2 import eager_aliases, functionalize_v2, overlapping_reads
from ..schema import OpInfo, op_info, qualname
from .state import RegistryState
from ..logs import get_logger

__all__ = ["add_backend_hook", "state_token"]

log = get_logger("autofunc.registry")


# Note [Backend hooks]
# Backends that need something installed before a program with autofunc's HOPs reaches them
# (Inductor: the re-inplace pass) add a hook here; it runs on every register/override and on
# every functionalized call (so in whatever thread compiles). The registry imports no backend.
_backend_hooks: list[Callable[[], None]] = []


def add_backend_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` whenever an op is routed to autofunc or one of its calls is
    functionalized (idempotent per hook; ``hook`` must be cheap and idempotent itself)."""
    if hook not in _backend_hooks:
        _backend_hooks.append(hook)


def run_backend_hooks() -> None:
    for hook in _backend_hooks:
        hook()


def _install_rule(op: OpOverload) -> None:
    try:
        torch.library.register_torch_dispatch(op, FunctionalTensorMode, _functional_rule)
    except RuntimeError as e:
        raise AutofuncError(
            f"autofunc.register: {qualname(op)} already has a FunctionalTensorMode rule that is "
            f"not autofunc's ({e})"
        ) from e


def _install_functionalize_kernel(op: OpOverload) -> torch.library.Library:
    _keep_pytorch_nodes_running(op)  # before the kernel: PyTorch's verdict without it
    ns, name = op._schema.name.split("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    overload = "" if op._overloadname == "default" else f".{op._overloadname}"

    def kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            return _functionalize_call(_cpp_functionalize_api(), op, args, kwargs)
        except RuntimeError as e:
            if "tls_on_entry" not in str(e):
                raise
            # torch 2.11: tracing a HOP from a Functionalize kernel trips an internal assert
            # of PyTorch's Python dispatch fallback (PythonFallbackKernel.cpp). PyTorch's own
            # handling refuses such ops under C++ functionalization on every version.
            raise AutofuncError(
                f"{qualname(op)}: C++ functionalization (torch.func.functionalize) of an "
                f"autofunc-registered op fails inside torch {torch.__version__} (an internal "
                f"assert of its Python dispatch fallback); torch.compile and torch.export work, "
                f"and torch >= 2.13 supports torch.func.functionalize"
            ) from e

    lib.impl(f"{name}{overload}", kernel, "Functionalize")
    return lib


# Note [PyTorch's nodes run beside the Functionalize kernel]
# PyTorch's ``auto_functionalized`` and ``auto_functionalized_v2`` check on every call, so at
# run time too, that PyTorch can functionalize the op, which it cannot for an op with a
# Functionalize kernel. A graph compiled while an op was PyTorch's to handle and run by a
# backend that runs these nodes as they are (``aot_eager``, an exported program's module)
# therefore raised "Cannot auto-functionalize op" if the op was registered (autofunc's kernel
# installed) before the node ran: by another thread in the middle of the call (the
# registrations guard is checked when a compiled call starts, and a change waits only for
# compiles, Note [Registrations wait for compiles]), or at any time before an exported program
# runs. Neither node uses the kernel: each clones what the op writes and calls the op on plain
# tensors. So the first time autofunc installs the kernel of an op it asks PyTorch whether it
# could functionalize the op (no kernel yet), and wraps the two classes' ``__call__`` (once per
# process) so that for such an op the nodes skip the check, whether or not the kernel is there
# at that moment, and run as PyTorch's would; every other op or HOP (a region's
# ``invoke_subgraph``) goes through PyTorch's own call, check included. The other changes need
# nothing at run time: autofunc's HOPs call the op from their dense rules whatever the
# registrations, and Inductor runs no HOP (it decomposes them when it compiles). At trace time
# PyTorch's functionalization hands an op with a Functionalize kernel to that kernel, so
# ``override(None, ops)`` takes the kernel away for its block (``api.override``).
_pytorch_accepts: dict[OpOverload, bool] = {}  # ops given autofunc's kernel -> PyTorch's verdict


def _keep_pytorch_nodes_running(op: OpOverload) -> None:
    """Let PyTorch's nodes of ``op`` run while it has autofunc's Functionalize kernel
    (Note [PyTorch's nodes run beside the Functionalize kernel]); once per op and per process."""
    from torch._higher_order_ops import auto_functionalize as af

    if op not in _pytorch_accepts:
        _pytorch_accepts[op] = bool(af.can_auto_functionalize(op))
    for hop in (af.auto_functionalized, af.auto_functionalized_v2):
        cls = type(hop)
        call = cls.__dict__.get("__call__")
        if call is None or getattr(call, "_autofunc", False):
            continue
        cls.__call__ = _call_beside_kernel(cls, call)


def _call_beside_kernel(cls: type, call: Callable) -> Callable:
    def __call__(self: Any, /, _mutable_op: Any, **kwargs: Any) -> Any:
        if isinstance(_mutable_op, OpOverload) and _pytorch_accepts.get(_mutable_op, False):
            return super(cls, self).__call__(_mutable_op, **kwargs)
        return call(self, _mutable_op, **kwargs)

    __call__._autofunc = True  # type: ignore[attr-defined]
    __call__.__wrapped__ = call  # type: ignore[attr-defined]
    return __call__


def _cpp_functionalize_api() -> Any:
    """The functionalization API for a call that reached the op's Functionalize kernel."""
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
    from torch._subclasses.functional_tensor import CppFunctionalizeAPI, FunctorchFunctionalizeAPI

    interpreter = retrieve_current_functorch_interpreter()
    if interpreter is None or interpreter.key() != TransformType.Functionalize:
        return CppFunctionalizeAPI()

    class _API(FunctorchFunctionalizeAPI):
        @contextlib.contextmanager
        def redispatch_to_next(self):
            # Leave the functorch level *and* the Functionalize key, so the HOP is traced as one
            # node instead of being functionalized again by its own rule.
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
            with self.interpreter.lower(), torch._C._ExcludeDispatchKeyGuard(keys):
                yield

    return _API(interpreter)


# The process's one registry state; the dispatch rule and the kernel read it on every call.
registry_state = RegistryState(_install_rule, _install_functionalize_kernel)


def state_token() -> tuple:
    """The registrations as a hashable value: equal values mean equal registrations."""
    return registry_state.token


def route(info: OpInfo, cpp_functionalize: bool | None = None) -> bool:
    """Install autofunc's dispatch rule and, where wanted, its Functionalize kernel for
    ``info.op`` (idempotent). Returns whether the rule was installed just now, for the first
    time."""
    first = registry_state.install_rule(info.op)
    registry_state.use_kernel(info.qualname, _wants_functionalize_kernel(info, cpp_functionalize), info.op)
    return first


# Note [The Functionalize kernel and Inductor]
# C++ functionalization (``torch.func.functionalize``) reaches an op only through a kernel for
# the ``Functionalize`` dispatch key; PyTorch's built-in installs none (it refuses mutable
# custom ops there). But Inductor reads that kernel's presence as "this op may not be
# auto-functionalizable" and then treats every output of the op as an alias of its mutable
# inputs: the output's buffer is never reused in place and the mutated buffer lives as long as
# the output. For an op that returns nothing this costs nothing, so it gets the kernel; an op
# that returns tensors gets it only with ``cpp_functionalize=True``.
def _wants_functionalize_kernel(info: OpInfo, cpp_functionalize: bool | None) -> bool:
    return info.num_returns == 0 if cpp_functionalize is None else cpp_functionalize


def _functional_rule(mode: FunctionalTensorMode, func: OpOverload, types, args, kwargs) -> Any:
    # Whatever this call becomes, the frame being compiled depends on the registrations.
    guards.guard_current_compile(state_token)
    if registry_state.strategy(qualname(func)) is None:  # unregistered: PyTorch's default handling
        return mode.__torch_dispatch__(func, types, args, kwargs)
    return _functionalize_call(PythonFunctionalizeAPI(mode=mode), func, args, kwargs)


def _functionalize_call(ctx: Any, func: OpOverload, args: tuple, kwargs: dict | None) -> Any:
    strategy = registry_state.strategy(qualname(func)) or "v2"
    if strategy == "v1":
        why = _v1_needs_v2(ctx, func, args, kwargs or {})
        if why is not None:
            log.debug("%s: %s; this call uses v2", func, why)
            strategy = "v2"
    run_backend_hooks()  # Note [Backend hooks]: this thread may lack the Inductor pass
    if strategy == "v1":
        return functionalize_v1(ctx, func, args, kwargs or {})
    return functionalize_v2(ctx, func, args, kwargs or {})


def _v1_needs_v2(ctx: Any, func: OpOverload, args: tuple, kwargs: dict) -> str | None:
    """Why a call of a v1-registered op must be functionalized with v2, or ``None``."""
    info = op_info(func)
    kw = normalize_args(func, args, kwargs)
    tensors = [t for _, _, t in mutable_slots(info, kw)]
    if any(may_overlap(ctx, a, b) for a, b in itertools.combinations(tensors, 2)):
        # Note [v1 and aliased args]
        # v1 clones each mutable argument separately. When two of them may share memory (the
        # same tensor twice, or overlapping views of one base) separate clones would break the
        # aliasing the op sees in eager, so that call is functionalized with v2, which clones
        # their common base once.
        return "mutable arguments may overlap"
    arg = inexact_slot(info, kw)
    if arg is not None:  # Note [Writing back unfold views] in hops/common.py
        return f"argument {arg} is an unfold view"
    aliases = eager_aliases(info, kw, ctx)
    if aliases:
        # Note [Read arguments eager aliases] in hops/v2.py: v1 would hand the op a copy of
        # the mutable argument and the old tensor as the read one, a call eager never made
        # (an op that reads what it wrote gives another result); v2 passes one memory for both.
        read, mutable, same_object = aliases[0]
        what = "the tensor passed" if same_object else "exactly the memory of"
        return f"read argument {read} is {what} {mutable}"
    reads = overlapping_reads(info, kw, ctx)
    if reads:
        # Note [Read arguments see the written memory] in hops/v2.py: likewise for a read over
        # the written memory in another geometry; v2 regenerates it from the written base.
        read, mutable = reads[0]
        return f"read argument {read} may share memory with {mutable}"
    return None

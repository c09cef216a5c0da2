"""User Triton kernels as functional mutation nodes: the adapter for PyTorch's
``triton_kernel_wrapper_functional`` (off by default; :func:`enable`).

A kernel launched from compiled code (``torch.library.wrap_triton(kernel)[grid](...)``, or the
body of a ``torch.library.triton_op``) reaches the functional graph as::

    out = triton_kernel_wrapper_functional(kernel_idx=, constant_args_idx=, grid=,
                                           tma_descriptor_metadata=, kwargs={name: value},
                                           tensors_to_clone=[names the kernel writes])
    new = out["name"]      # the written tensor's new value, a copy of ``kwargs["name"]``

``tensors_to_clone`` is PyTorch's analysis of the kernel's IR (Triton's TTIR). Each tensor it
names is one buffer of the :class:`~autofunc.hops.adapter.Mutation`, written whole (the kernel
receives the tensor as it is, like a v1 argument); every other tensor argument is a read. The
direct call is ``triton_kernel_wrapper_mutation`` with the same kernel, constants, grid and TMA
metadata, on the buffers or their clones: a clone copies the written tensor alone, where
PyTorch's own decomposition (``clone_preserve_strides``) copies its storage from element 0 to
the tensor's end.

Note [A kernel that writes every tensor it gets]
When the IR analysis fails, PyTorch counts every tensor argument as written (and logs a
warning from ``identify_accessed_tensors``). Nothing on the node says which happened, so a call
whose every tensor argument (two or more) is written says so in its report: the reads among
them are then cloned too whenever a later read of their memory needs the old value, which is
sound, only not as cheap as it could be.

Note [One tensor passed as two written pointers]
Functionalization clones each written argument on its own, so ``kernel(x, x)`` writing both
pointers gives two copies, and the graph's value of ``x`` afterwards is the copy the last
pointer wrote: the other pointer's writes are lost, where eager has both (pytorch#196657;
PyTorch's own decomposition gives that wrong result). In the graph alone that case looks like
``y = x.clone(); kernel(x, y)`` once Inductor removed the clone as a no-op (``remove_noop_ops``),
where separate copies are right. The node's ``eager_input_vals`` (the fake values tracing
recorded, before any post-grad pass) tell them apart: one storage and one geometry is one eager
tensor. Such pointers share one buffer, written as eager writes it (in place, or one copy both
write), and every output that names one of them is that buffer. Anything else stays a buffer
per pointer, one of which may be written in place (Note [One memory, two mutable buffers]); a
node without recorded values keeps the graph's meaning and says so in its report.

Imports ``adapter``, ``common``, ``views`` and ``regions`` only (and PyTorch's HOP objects).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import fx
from torch._higher_order_ops.triton_kernel_wrap import (
    kernel_side_table,
    triton_kernel_wrapper_functional,
    triton_kernel_wrapper_mutation,
)

from .. import views
from ..regions import same_geometry
from .adapter import (
    DirectCall,
    Mutation,
    Slot,
    register_adapter,
    registered,
    unregister_adapter,
)
from .common import same_storage

__all__ = ["KernelCall", "TritonAdapter", "enable", "enabled", "kernel_name"]

# The node's own arguments besides ``kwargs`` (the kernel's) and ``tensors_to_clone``.
_LAUNCH = ("kernel_idx", "constant_args_idx", "grid", "tma_descriptor_metadata")


def kernel_name(kernel_idx: int) -> str:
    """The Triton kernel's function name (``"triton:<name>"``), for reports."""
    try:
        kernel = kernel_side_table.get_kernel(kernel_idx)
    except (AssertionError, KeyError, IndexError):  # a graph from another process
        return f"triton:kernel#{kernel_idx}"
    fn = getattr(kernel, "fn", kernel)  # an Autotuner wraps the JITFunction
    fn = getattr(fn, "fn", fn)
    return f"triton:{getattr(fn, '__name__', kernel_idx)}"


class TritonAdapter:
    """Reads a ``triton_kernel_wrapper_functional`` call for the re-inplace pass."""

    strategy = "triton"

    def read(self, node: Any) -> Mutation:
        launch = {k: node.kwargs[k] for k in _LAUNCH}
        args: dict[str, Any] = dict(node.kwargs["kwargs"])
        tensors = [k for k, v in args.items() if _is_tensor(v)]
        written = [k for k in node.kwargs["tensors_to_clone"] if _is_tensor(args.get(k))]
        # Note [One tensor passed as two written pointers]: one buffer per tensor eager passed
        buffer_of: dict[str, int] = {}
        firsts: list[str] = []
        eager = _eager_values(node)
        for k in written:
            same = next((f for f in firsts if _one_eager_tensor(args, eager, f, k)), None)
            if same is None:
                firsts.append(k)
                buffer_of[k] = len(firsts) - 1
            else:
                buffer_of[k] = buffer_of[same]
        slots = tuple(Slot(k, None, buffer_of[k], views.ViewChain()) for k in written)
        reads = {k: (None if k in written else v) for k, v in args.items()}
        # the graph goes on with the copy of the last pointer of a tensor; every output that
        # names a pointer of the buffer holds its new value
        last = {i: k for k, i in buffer_of.items()}
        keys = tuple(
            (last[i], *(k for k, j in buffer_of.items() if j == i and k != last[i]))
            for i in range(len(firsts))
        )
        notes = []
        unknown = sorted(
            k
            for k in written
            if [args[j] for j in written].count(args[k]) > 1 and eager is None
        )
        if unknown:
            notes.append(
                f"{', '.join(unknown)} are one value and the node records no eager values: "
                "each pointer keeps a copy of its own, as the functional graph says; if eager "
                "passed one tensor to them, that loses all but the last one's writes "
                "(pytorch#196657; Note [One tensor passed as two written pointers])"
            )
        if len(tensors) > 1 and len(written) == len(tensors):
            notes.append(
                "every tensor argument counts as written: the kernel writes them all, or "
                "PyTorch could not analyse its IR (a warning from identify_accessed_tensors says "
                "so); reads among them may be cloned needlessly "
                "(Note [A kernel that writes every tensor it gets])"
            )
        return KernelCall(
            None,
            self.strategy,
            tuple(args[k] for k in firsts),
            slots,
            reads,
            note="; ".join(notes),
            launch=launch,
            keys=keys,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelCall(Mutation):
    """A ``triton_kernel_wrapper_functional`` call as the pass sees it (Note [The adapter
    seam] in hops/adapter.py): its outputs are keyed by argument name, and its direct call is
    ``triton_kernel_wrapper_mutation`` of the same kernel, constants, grid and TMA metadata
    (``launch``), returning nothing."""

    launch: dict[str, Any]  # the node's own arguments (``_LAUNCH``)
    keys: tuple[tuple[str, ...], ...]  # per buffer, the names of the outputs holding it

    @property
    def op_name(self) -> str:
        return kernel_name(self.launch["kernel_idx"])

    def output_keys(self, i: int) -> tuple[str, ...]:
        return self.keys[i]

    def direct_call(self, args: list[Any]) -> DirectCall:
        kwargs = self.call_kwargs(args)
        return DirectCall(triton_kernel_wrapper_mutation, (), {**self.launch, "kwargs": kwargs}, 0)


def _eager_values(node: Any) -> dict[str, Any] | None:
    """The kernel arguments' values as tracing saw them (``node.meta["eager_input_vals"]``,
    recorded before any post-grad pass merged nodes), by argument name; ``None`` if absent."""
    vals = node.meta.get("eager_input_vals")
    try:
        kwargs = vals[1]["kwargs"]
    except (TypeError, KeyError, IndexError):
        return None
    return kwargs if isinstance(kwargs, dict) else None


def _one_eager_tensor(args: dict, eager: dict | None, a: str, b: str) -> bool:
    """Whether pointers ``a`` and ``b`` got one tensor in eager: one graph value now, and, as
    tracing recorded them, the same storage with the same geometry (a clone Inductor removed
    as a no-op has a storage of its own there)."""
    if args[a] is not args[b] or eager is None:
        return False
    x, y = eager.get(a), eager.get(b)
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return False
    return same_storage(x, y) and same_geometry(x, y)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, fx.Node) and isinstance(value.meta.get("val"), torch.Tensor)


def enable(on: bool = True) -> None:
    """Make the re-inplace pass rewrite user Triton kernel calls (``on``), or leave them to
    Inductor's own handling again."""
    if on:
        register_adapter(triton_kernel_wrapper_functional, TritonAdapter())
    else:
        unregister_adapter(triton_kernel_wrapper_functional, TritonAdapter)


def enabled() -> bool:
    return registered(triton_kernel_wrapper_functional, TritonAdapter)

"""User Triton kernels on a machine without a GPU: what the Triton benchmark case and the tests
use to trace, analyse and run them on CPU.

Two things stand between a CPU machine and a compiled program that launches a user kernel:

* PyTorch treats ``wrap_triton(kernel)`` as a kernel only when ``has_triton()`` finds a device
  Triton supports, and it analyses which tensors the kernel writes by lowering the kernel to
  Triton's IR for the active driver's target. :func:`gpu_target` installs a stub driver that
  reports an H100 target (nothing is compiled for it: only the IR is made), and a ``cpu`` entry
  in Triton's backend table so that ``has_triton()`` holds. The write analysis is then exact.
* A traced graph launches the kernel through PyTorch's kernel side table.
  :func:`interpret_kernels` replaces each kernel there by one that launches under Triton's
  interpreter (still a ``JITFunction``, so a retrace analyses it as before), so the captured
  graphs run on CPU tensors and can be compared with eager (which runs the interpreter too).

``jit`` makes a ``JITFunction`` even under ``TRITON_INTERPRET=1`` (which ``tests/conftest.py``
sets, and under which ``triton.jit`` returns an interpreted function Dynamo does not trace).
:func:`post_grad_graph` compiles with Inductor up to the end of its post-grad passes (the
graph its code would be generated from; code generation for a user kernel needs a GPU) and
:func:`allocated_bytes` counts what that graph allocates.

Needs ``triton``; importing this module without it raises ``ImportError``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
import triton.language as tl  # noqa: F401 - _language_snapshot finds both in its globals
import triton.language.core as _tl_core  # noqa: F401 - (triton's own jit helpers patch this one)
from torch import fx
from triton.backends import Backend, DriverBase, backends
from triton.backends.compiler import GPUTarget
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver as _driver
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

__all__ = [
    "allocated_bytes",
    "eager",
    "gpu_target",
    "interpret_kernels",
    "jit",
    "post_grad_graph",
    "preload",
]


def jit(fn: Callable) -> JITFunction:
    """``triton.jit`` that always makes a ``JITFunction`` (what Dynamo traces)."""
    return JITFunction(fn)


class _StubDriver(DriverBase):
    """Reports a CUDA sm90 target; launches nothing."""

    @classmethod
    def is_active(cls) -> bool:
        return False

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_benchmarker(self) -> Any:
        raise NotImplementedError("the stub driver runs nothing")

    def get_device_interface(self) -> Any:
        raise NotImplementedError("the stub driver runs nothing")

    def get_empty_cache_for_benchmark(self) -> Any:
        raise NotImplementedError("the stub driver runs nothing")

    def clear_cache(self, cache: Any) -> None:
        pass


# Note [Triton's interpreter leaves triton.language patched]
# The interpreter runs a kernel with ``triton.language``'s builtins swapped for interpreted
# ones and swaps them back afterwards, but a jit function called from an interpreted kernel
# (a device function) swaps them in again and never back (triton 3.9,
# ``InterpretedFunction.__call__``). Lowering a kernel to IR afterwards (PyTorch's write
# analysis) then fails, and PyTorch counts every argument as written. So the language's
# attributes are recorded here, once, before anything is interpreted (the test suite's
# conftest imports this module first), and :func:`gpu_target` puts them back on entry.
def _language_snapshot() -> list[tuple[object, str, object]]:
    from triton.runtime import interpreter

    if not hasattr(interpreter, "_LangPatchScope"):  # another Triton: nothing recorded
        return []
    scope = interpreter._patch_lang(_language_snapshot)  # records what it replaces
    changes = list(getattr(scope, "_changes", ()))
    scope.restore()
    return changes


def _restore_language() -> None:
    from triton.runtime import interpreter

    missing = getattr(interpreter, "_MISSING", None)
    for obj, name, original in reversed(_LANGUAGE):
        if original is missing:
            if hasattr(obj, name):
                delattr(obj, name)
        else:
            setattr(obj, name, original)


_LANGUAGE = _language_snapshot()


class _NoCompiler(backends["nvidia"].compiler):  # type: ignore[misc, name-defined]
    """The ``cpu`` entry's compiler: claims no target, so the sm90 target keeps one backend."""

    @staticmethod
    def supports_target(target: Any) -> bool:
        return False


@contextlib.contextmanager
def gpu_target() -> Iterator[None]:
    """Make PyTorch see Triton with an sm90 target for the block (see the module)."""
    from torch.utils._triton import has_triton

    _restore_language()  # Note [Triton's interpreter leaves triton.language patched]
    before, entry = _driver._active, backends.get("cpu")  # nested blocks restore the outer's
    backends["cpu"] = Backend(compiler=_NoCompiler, driver=_StubDriver)
    _driver.set_active(_StubDriver())
    has_triton.cache_clear()
    try:
        assert has_triton(), "the stub driver did not make has_triton() hold"
        yield
    finally:
        if entry is None:
            backends.pop("cpu", None)
        else:
            backends["cpu"] = entry
        _driver._active = before
        has_triton.cache_clear()


class _Interpreted(JITFunction):
    """A ``JITFunction`` that launches under Triton's interpreter. It stays a ``JITFunction``
    (every attribute of the original), so a retrace (a recompile for new shapes) still analyses
    its IR; only ``run`` differs."""

    def __init__(self, kernel: JITFunction) -> None:  # no super().__init__: a copy of kernel
        self.__dict__.update(kernel.__dict__)
        self._interpreter = InterpretedFunction(kernel.fn)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        return self._interpreter.run(*args, grid=grid, warmup=warmup, **kwargs)


def _interpreted(kernel: Any) -> Any:
    if isinstance(kernel, Autotuner):  # a copy whose function launches interpreted
        tuner = copy.copy(kernel)
        tuner.fn = _interpreted(kernel.fn)
        return tuner
    if isinstance(kernel, JITFunction) and not isinstance(kernel, _Interpreted):
        return _Interpreted(kernel)
    return kernel


def interpret_kernels() -> None:
    """Swap every kernel in PyTorch's kernel side table for Triton's interpreter (idempotent;
    a retrace finds the original kernel object and reuses its index)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    for idx, kernel in list(kernel_side_table.id_to_kernel.items()):
        kernel_side_table.id_to_kernel[idx] = _interpreted(kernel)


def preload(*kernels: Any) -> None:
    """Put ``kernels`` in PyTorch's kernel side table, interpreted, before anything traces them
    (a compile that also runs, such as ``explain``, launches them in the same call)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    for kernel in kernels:
        idx = kernel_side_table.add_kernel(kernel)
        kernel_side_table.id_to_kernel[idx] = _interpreted(kernel)


def eager(kernel: Any) -> Any:
    """``kernel`` as eager runs it on CPU tensors: under the interpreter."""
    return _interpreted(kernel)


class _Stop(Exception):
    """Raised after the post-grad passes: the graph is what was wanted."""


def post_grad_graph(fn: Callable, args: list) -> fx.GraphModule:
    """The forward graph Inductor would generate code from for ``fn(*args)``: compiled up to
    the end of the post-grad passes (autofunc's pass, then Inductor's own re-inplacing and the
    decomposition of the functional kernel calls), without caches. Call inside
    :func:`gpu_target`."""
    from torch._inductor import compile_fx

    graphs: list[fx.GraphModule] = []
    run_passes = compile_fx._recursive_post_grad_passes

    depth = [0]

    def record(gm: fx.GraphModule, is_inference: bool = False) -> None:
        depth[0] += 1  # the passes of a region's subgraph run from its caller's, through here
        try:
            run_passes(gm, is_inference)
        finally:
            depth[0] -= 1
        if depth[0]:
            return
        graphs.append(gm)
        raise _Stop

    torch._dynamo.reset()
    patch = {"fx_graph_cache": False}
    with (
        mock.patch.object(compile_fx, "_recursive_post_grad_passes", record),
        torch._inductor.config.patch(patch),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        try:
            torch.compile(fn, backend="inductor", fullgraph=True)(*args)
        except Exception:  # _Stop, as Dynamo wraps what the backend raised
            if not graphs:
                raise
    # Dynamo's reset empties the kernel side table the graph's launches index: keep it, so the
    # graph can still be run (its kernels interpreted)
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table as table

    kept = dict(table.id_to_kernel), dict(table.kernel_to_id), dict(table.constant_args)
    torch._dynamo.reset()
    table.id_to_kernel.update(kept[0])
    table.kernel_to_id.update(kept[1])
    table.constant_args.update(kept[2])
    return graphs[0]


# What allocates memory in a post-grad graph (its inputs are the caller's).
_ALLOCATIONS = frozenset(
    {
        torch.ops.aten.clone.default,
        torch.ops.aten.empty_strided.default,
        torch.ops.aten.empty.memory_format,
        torch.ops.aten.zeros.default,
        torch.ops.aten.full.default,
    }
)


def allocated_bytes(gm: fx.GraphModule) -> int:
    """Bytes of the storages the graph's clones and allocations create."""
    total = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _ALLOCATIONS:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                total += int(val.untyped_storage().nbytes())
    return total

"""Optional-import shim for Triton: the only place the kernel modules import ``triton`` from.

Exports ``HAS_TRITON``, ``triton``, ``tl``, ``require_triton`` and ``use_triton`` (the custom
ops' dispatch rule). When Triton is not installed, ``triton.jit`` is a
stub decorator and ``tl`` a stub namespace, so the kernel modules still import (their ``tl.int64``
and ``tl.constexpr`` annotations evaluate) and the custom ops fall back to the ``_ref`` path.
Calling a launcher without Triton raises ``RuntimeError`` via :func:`require_triton`.

Must not import anything from ``autofunc`` (the kernels package is a leaf).
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch

__all__ = ["HAS_TRITON", "require_triton", "tl", "triton", "use_triton"]

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised by tests/kernels/test_triton_shim.py
    HAS_TRITON = False

    class _StubNamespace(types.SimpleNamespace):
        """Stands in for ``triton.language``: any attribute (``tl.int64``, ``tl.constexpr``)
        resolves to a placeholder so kernel signatures evaluate at import time."""

        def __getattr__(self, name: str) -> Any:
            return f"tl.{name} (triton is not installed)"

    class _StubKernel:
        """What ``@triton.jit`` returns without Triton: importable, never launchable."""

        def __init__(self, fn: Callable[..., Any]) -> None:
            self.fn = fn
            self.__name__ = fn.__name__
            self.__doc__ = fn.__doc__

        def __getitem__(self, grid: Any) -> _StubKernel:
            return self  # kernel[grid](...) fails in __call__

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            require_triton(self.__name__)

    def _stub_jit(fn: Callable[..., Any] | None = None, **_: Any) -> Any:
        if fn is None:
            return _stub_jit
        return _StubKernel(fn)

    triton = types.SimpleNamespace(jit=_stub_jit)  # type: ignore[assignment]
    tl = _StubNamespace()  # type: ignore[assignment]


def require_triton(what: str) -> None:
    """Raise ``RuntimeError`` naming ``what`` when Triton is not installed."""
    if not HAS_TRITON:
        raise RuntimeError(
            f"{what} needs triton, which is not installed; install autofunc[triton] or call the "
            f"custom op (autofunc_kernels::*), which falls back to the PyTorch reference."
        )


def use_triton(tensor: torch.Tensor) -> bool:
    """The custom ops' dispatch rule: Triton for CUDA tensors when installed, else ``_ref``."""
    return HAS_TRITON and tensor.is_cuda

"""Kernel tests: the Triton launchers run on CPU tensors under the Triton interpreter.

``TRITON_INTERPRET`` must be set before ``triton`` is imported and before ``@triton.jit`` wraps
the kernels (``tests/conftest.py`` sets it before importing torch, which imports triton; it is
repeated here for runs of this folder alone). Also holds the one per-dtype tolerance table (``assert_close``).
"""

import importlib.util
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

if importlib.util.find_spec("triton") is None:
    pytest.skip(
        "triton is not installed; the kernel tests run the Triton launchers",
        allow_module_level=True,
    )

INTERPRET = os.environ["TRITON_INTERPRET"] == "1"


if not INTERPRET and not torch.cuda.is_available():
    pytest.skip(
        "TRITON_INTERPRET=0 and no CUDA device: nothing can run the Triton kernels",
        allow_module_level=True,
    )

# One tolerance table for every kernel. bf16 allows ~2 ulp: besides fp32 reduction order, the
# interpreter rounds fp32 -> bf16 by truncation where compiled Triton rounds to nearest even.
TOLERANCES = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2},
}


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, **kwargs) -> None:
    torch.testing.assert_close(actual, expected, **TOLERANCES[expected.dtype], **kwargs)


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected)`` with the tolerance of ``expected.dtype``."""
    return _assert_close


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

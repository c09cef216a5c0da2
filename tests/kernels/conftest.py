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


# Tests of the CPU paths (the custom ops' reference fallback, the check policy, the shim) keep
# their tensors on the CPU when the rest run on a GPU.
_CPU_ONLY_MODULES = ("test_checks", "test_triton_shim")


@pytest.fixture(autouse=True)
def _device(request):
    """Compiled (``TRITON_INTERPRET=0`` on a CUDA machine) the launcher tests make their
    tensors on the GPU: every factory call without a device goes there. Under the interpreter
    nothing changes."""
    name = request.node.originalname or request.node.name
    cpu_only = name.endswith("_op_cpu") or request.module.__name__.endswith(_CPU_ONLY_MODULES)
    if INTERPRET or cpu_only:
        yield
        return
    with torch.device("cuda"):
        yield


@pytest.fixture
def assert_close():
    """``assert_close(actual, expected)`` with the tolerance of ``expected.dtype``."""
    return _assert_close


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# A value no kernel writes: the guard regions around a tensor under test are filled with it.
SENTINEL = -1234.0
GUARD = 64  # elements of guard on each side


class Guarded:
    """A tensor of ``shape`` (filled with ``randn``) in the middle of a bigger 1-D buffer whose
    ``GUARD`` elements on either side hold ``SENTINEL``: a kernel given ``.tensor`` that writes
    outside it changes a guard."""

    def __init__(self, shape, dtype=torch.float32):
        numel = torch.Size(shape).numel()
        self.buffer = torch.full((GUARD + numel + GUARD,), SENTINEL, dtype=dtype)
        self.tensor = self.buffer[GUARD : GUARD + numel].view(shape)
        self.tensor.copy_(torch.randn(shape))

    def guards_intact(self) -> bool:
        guards = torch.cat([self.buffer[:GUARD], self.buffer[-GUARD:]])
        return bool((guards == SENTINEL).all())


@pytest.fixture
def guarded():
    """``guarded(shape, dtype)``: a :class:`Guarded` tensor."""
    return Guarded


@pytest.fixture
def unchecked(monkeypatch):
    """Launchers skip the host-side index checks (AUTOFUNC_KERNEL_CHECKS=0), so a test reaches
    the kernels' own masks with invalid indices, as on a GPU in the default mode."""
    monkeypatch.setenv("AUTOFUNC_KERNEL_CHECKS", "0")


@pytest.fixture
def checked(monkeypatch):
    """Launchers check index values (AUTOFUNC_KERNEL_CHECKS=1): the CPU default, and what a
    test of the checks needs on a GPU, where they are off by default."""
    monkeypatch.setenv("AUTOFUNC_KERNEL_CHECKS", "1")


@pytest.fixture
def call_fake():
    """``call_fake(op, *args)``: run ``op``'s fake implementation on fake copies of ``args``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def call(op, *args):
        with FakeTensorMode() as mode:
            fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            return op(*fake)

    return call

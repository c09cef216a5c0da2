import os

# Triton kernels run on CPU under the interpreter; this must be set before torch (whose
# Inductor imports triton) is imported. An explicit TRITON_INTERPRET=0 (on a GPU) is kept.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import autofunc  # noqa: E402,F401
from autofunc.bench import corpus  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    """Registers every corpus op with one strategy for the duration of a test."""
    regs = corpus.register_all(request.param)
    yield request.param
    for r in regs:
        r.remove()

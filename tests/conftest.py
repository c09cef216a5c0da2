import pytest
import torch

import autofunc
from autofunc.bench import corpus


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


def run_eager_and(compiled_fn, program):
    """(eager result, eager inputs after, compiled result, compiled inputs after)."""
    inputs = program.inputs()
    eager_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    expected = program.fn(*eager_inputs)
    got = compiled_fn(*inputs)
    return expected, eager_inputs, got, list(inputs)

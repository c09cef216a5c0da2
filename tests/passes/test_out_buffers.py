"""Out-buffer ops under Inductor: a fresh ``torch.empty`` the op writes is allocated where it is
first used, so Inductor's memory planning reuses the buffers freed before it (Note [Out
buffers allocated where they are first used] in autofunc/backends/inductor/repairs.py). The
program is vLLM's fused norm + fp8 quant chain (``fp8_norm_quant_chain`` in
tools/corpus.py), compiled with Inductor under PyTorch's built-in v2 and autofunc v1/v2."""

import re

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

from autofunc.inductor import collect_reports
from autofunc.testing import run_against_eager
from tools import corpus

PROGRAM = corpus.PROGRAMS["fp8_norm_quant_chain"]

# ``buf3 = empty_strided_cpu((6, 32), (32, 1), torch.float8_e4m3fn)`` in the wrapper
_ALLOCATION = re.compile(r"empty_strided\w*\(\(([^)]*)\), \([^)]*\), (?:dtype=)?torch\.(\w+)")


def _allocated_bytes(code: str) -> int:
    """The bytes the generated wrapper allocates per call (its ``empty_strided`` calls)."""
    total = 0
    for m in _ALLOCATION.finditer(code):
        numel = 1
        for size in filter(str.strip, m.group(1).split(",")):
            numel *= int(size)
        total += numel * getattr(torch, m.group(2)).itemsize
    return total


def _compile(strategy):
    """The wrapper code, the eager check and the clones left of the program compiled with
    ``strategy`` (``None``: PyTorch's built-in auto_functionalized_v2)."""
    regs = corpus.register_all(strategy)
    torch._dynamo.reset()
    codes = []

    def compiled(*args):
        out, code = run_and_get_code(torch.compile(PROGRAM.fn, fullgraph=True), *args)
        codes.extend(code)
        return out

    try:
        with (
            inductor_config.patch(enable_auto_functionalized_v2=True, fx_graph_cache=False),
            collect_reports() as reports,
        ):
            check = run_against_eager(PROGRAM.fn, compiled, PROGRAM.inputs())
    finally:
        for r in regs:
            r.remove()
        torch._dynamo.reset()
    return "\n".join(codes), check, sum(r.num_clones for r in reports)


@pytest.fixture(scope="module")
def builtin_bytes():
    code, check, _ = _compile(None)
    assert check.correct, check.mismatch
    return _allocated_bytes(code)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_fp8_chain_allocates_no_more_than_the_builtin(builtin_bytes, strategy):
    # No clone, and each layer's fp8 output is allocated after the previous one's dequantized
    # copy and matmul, where it takes a freed buffer (before the fix: 1,368 B more under v2)
    code, check, clones = _compile(strategy)
    assert check.correct, check.mismatch  # outputs, and the residual the calls write
    assert clones == 0
    assert builtin_bytes > 0 and _allocated_bytes(code) <= builtin_bytes

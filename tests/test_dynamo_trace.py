"""Dynamo traces code that already calls autofunc's HOPs (Note [Dynamo meets an autofunc HOP]):
the backward graph compiled autograd re-traces when selective checkpointing recomputes a HOP,
and ``torch.compile`` of an exported, decomposed module. Each runs like eager, and AOTAutograd
re-functionalizes the HOP so the re-inplace pass sees it."""

from __future__ import annotations

import pytest
import torch
from test_export import _Program  # the Module wrapper export takes
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import autofunc
from autofunc.testing import compile_capture, same_result
from tools import corpus

pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")


@torch.library.custom_op("aftest_dynamo::add_five_", mutates_args={"x"})
def add_five_(x: torch.Tensor) -> None:
    x.add_(5)


@pytest.fixture(params=["v1", "v2"])
def hop(request):
    """Registers ``add_five_`` with one strategy; yields that strategy's HOP."""
    reg = autofunc.register(add_five_, strategy=request.param)
    yield getattr(autofunc, f"auto_functionalized_{request.param}")
    reg.remove()


# -- compiled autograd + selective activation checkpointing -------------------------------------


def _matmul_add_matmul(x):
    h = x @ x
    add_five_(h)
    return h @ h


def _checkpointed(hop):
    def recompute_the_hop(ctx, func, *args, **kwargs):
        if func is hop:
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.PREFER_RECOMPUTE

    def context_fn():
        return create_selective_checkpoint_contexts(recompute_the_hop)

    def fn(x):
        return checkpoint(_matmul_add_matmul, x, use_reentrant=False, context_fn=context_fn)

    return fn


def test_compiled_autograd_retraces_a_recomputed_hop(hop):
    # SAC recomputes the HOP in the backward graph; compiled autograd hands that graph to
    # Dynamo, which must record the HOP (it used to raise "unsupported HigherOrderOperator").
    x0 = torch.randn(4, 4)
    x_eager = x0.clone().requires_grad_()
    out_eager = _matmul_add_matmul(x_eager)
    out_eager.sum().backward()

    backward_graphs = []

    def compiler_fn(gm):
        compiled, captured = compile_capture(gm)
        backward_graphs.append(captured)
        return compiled

    x = x0.clone().requires_grad_()
    out = torch.compile(_checkpointed(hop), backend="aot_eager", fullgraph=True)(x)
    with torch._dynamo.compiled_autograd._enable(compiler_fn):
        out.sum().backward()
    assert same_result(out_eager, out) and same_result(x_eager.grad, x.grad)
    assert same_result(x_eager.detach(), x.detach())
    # The HOP reached the backward graph, and the pass rewrote it there.
    calls = [c for g in backward_graphs for c in g.report.calls]
    assert any(hop.name() in g for captured in backward_graphs for g in captured.functional)
    assert calls


# -- torch.compile of an exported module --------------------------------------------------------




@pytest.mark.parametrize("name", ["input_row", "list_arg", "kv_layers"])
def test_compile_an_exported_module(name, strategy):
    p = corpus.PROGRAMS[name]
    module = torch.export.export(_Program(p.fn), p.inputs()).run_decompositions().module()
    compiled, captured = compile_capture(module)
    for _ in range(2):
        inputs = list(p.inputs())
        eager_inputs = [t.clone() for t in inputs]
        assert same_result(p.fn(*eager_inputs), compiled(*inputs))
        assert same_result(eager_inputs, inputs)
    # The unlifted graph's HOPs went through Dynamo and AOTAutograd to the pass.
    assert f"autofunc_{strategy}" in captured.functional[0]
    assert captured.report.calls


def _slice_of_clone(x):
    buf = x.clone()
    corpus.add_(buf[1:], x[1:])  # under v2, _views holds the symbolic size of x
    return buf


def test_compile_a_dynamic_exported_module(strategy):
    rows = torch.export.Dim("rows", min=3)
    ep = torch.export.export(
        _Program(_slice_of_clone), (torch.randn(4, 3),), dynamic_shapes=(({0: rows},),)
    )
    compiled, captured = compile_capture(ep.run_decompositions().module(), dynamic=True)
    for n in (4, 6):
        x = torch.randn(n, 3)
        assert same_result(_slice_of_clone(x.clone()), compiled(x))
    assert len(captured.functional) == 1  # one graph for both sizes

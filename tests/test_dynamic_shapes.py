"""Symbolic and data-dependent sizes: mutable arguments whose sizes are unbacked (``nonzero()``,
``.item()``), ops that return unbacked sizes, and symbolic sizes in the code the pass emits.
Each program runs compiled and eagerly: same outputs, same final inputs."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.config as dynamo_config
import torch.utils._pytree as pytree
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, resolve_unbacked_bindings

import autofunc
from autofunc import symbolic
from autofunc.bench.model import MUTABLE_OPS, ModelConfig, TinyDecoder, make_inputs
from autofunc.testing import compile_capture, run_against_eager, same_result
from tools import corpus

_NS = "autofunc_dyn"


@torch.library.custom_op(f"{_NS}::bump", mutates_args={"x"})
def bump(x: torch.Tensor) -> None:
    """x += 1"""
    x.add_(1)


@torch.library.custom_op(f"{_NS}::make_image", mutates_args={"decoder"})
def make_image(decoder: torch.Tensor) -> torch.Tensor:
    """decoder += 1; returns a tensor whose sizes only the kernel knows."""
    decoder.add_(1)
    return torch.arange(24.0).reshape(2, 3, 4)


@make_image.register_fake
def _(decoder):
    ctx = torch.library.get_ctx()
    return decoder.new_empty([ctx.new_dynamic_size() for _ in range(3)], dtype=torch.float32)


@torch.library.custom_op(f"{_NS}::make_pair", mutates_args={"decoder"})
def make_pair(decoder: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """decoder += 1; returns two tensors whose sizes only the kernel knows."""
    decoder.add_(1)
    return torch.ones(3), torch.arange(6.0).reshape(2, 3)


@make_pair.register_fake
def _(decoder):
    ctx = torch.library.get_ctx()
    n, m = ctx.new_dynamic_size(), ctx.new_dynamic_size()
    f32 = torch.float32
    return decoder.new_empty([n], dtype=f32), decoder.new_empty([m, n], dtype=f32)


@pytest.fixture
def ops(strategy):
    """The ops of this file routed through autofunc with the test's strategy."""
    regs = [autofunc.register(op, strategy=strategy) for op in (bump, make_image, make_pair)]
    yield
    for r in regs:
        r.remove()


@pytest.fixture
def data_dependent():
    with dynamo_config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        yield


def check(fn, compiled, *inputs):
    """``compiled(*inputs)`` returns what ``fn`` does and leaves the inputs as ``fn`` does."""
    result = run_against_eager(fn, compiled, inputs)
    assert result.correct, f"{result.mismatch} differ:\n{result.expected}\n{result.got}"


# -- unbacked sizes ----------------------------------------------------------------------------


def _nonzero_rows(m):
    idx = m.nonzero().float()  # [u0, 2], contiguous
    bump(idx)
    return idx * 2


def _item_column(n):
    t = torch.ones(n.item(), 2)  # [u0, 2]
    bump(t[:, 1])  # [u0] with stride 2: contiguous only if u0 <= 1
    return t * 2


@pytest.mark.usefixtures("ops", "data_dependent")
def test_unbacked_mutable_arg(strategy):
    # clone_exact asked is_contiguous() of a [u0, 2] tensor: GuardOnDataDependentSymNode.
    compiled, captured = compile_capture(_nonzero_rows)
    check(_nonzero_rows, compiled, torch.tensor([[1, 0], [0, 1], [1, 1]]))
    check(_nonzero_rows, compiled, torch.tensor([[0, 0], [2, 0], [0, 0]]))  # same graph, u0 = 1
    assert captured.report.calls and len(captured.modules) == 1


@pytest.mark.usefixtures("ops", "data_dependent")
def test_unbacked_noncontiguous_mutable_arg(strategy):
    # The clone the pass emits for a [u0] view of stride 2 asked is_contiguous() too; it is now
    # copied without a guard, its size a sym_size node of the graph.
    compiled, captured = compile_capture(_item_column)
    for n in (3, 1, 0):
        check(_item_column, compiled, torch.tensor(n))
    assert "autofunc_v" not in captured.reinplaced[0]


def _make_image(x):
    return make_image(x)


def _make_pair(x):
    a, b = make_pair(x)
    return a.sum() + b.sum(), b


@pytest.mark.parametrize("fn", [_make_image, _make_pair])
@pytest.mark.usefixtures("ops", "data_dependent")
def test_unbacked_output_inductor(strategy, fn):
    # Inductor's FakeTensorUpdater re-ran the direct op call the pass emits, got fresh unbacked
    # sizes and compared them with the old ones downstream ("'GreaterThan' - 'GreaterThan'").
    compiled = torch.compile(fn, backend="inductor", fullgraph=True)
    check(fn, compiled, torch.zeros(10, dtype=torch.int64))


@pytest.mark.usefixtures("ops", "data_dependent")
@pytest.mark.parametrize("fn, op", [(_make_image, make_image), (_make_pair, make_pair)])
def test_unbacked_bindings_follow_the_direct_call(strategy, fn, op):
    # The same fix seen in the graph: the call carries the HOP's bindings, paths rebased onto
    # its own result (one tensor, or a tuple).
    compiled, captured = compile_capture(fn)
    compiled(torch.zeros(4, dtype=torch.int64))
    graph = captured.modules[0].graph
    (call,) = graph.find_nodes(op="call_function", target=op._opoverload)
    val = call.meta["val"]
    sizes = [n for t in pytree.tree_leaves(val) for n in t.shape]
    bindings = resolve_unbacked_bindings(sizes[0].node.shape_env, call.meta["unbacked_bindings"])
    bound = {pytree.key_get(val, path).node.expr for path in bindings.values()}
    assert bound == {n.node.expr for n in sizes}


# -- symbolic sizes in emitted code -------------------------------------------------------------


def _empty_column(x):
    buf = x.clone()
    corpus.add_(buf[:, 3:4], x[:, 3:4])  # empty once x has fewer than 4 columns
    return buf


def test_maybe_empty_slice_dynamic(strategy):
    # The recompile for a (10, 2) input cannot tell whether the slice is empty: v2 regenerates
    # it with as_strided, whose extent emit.py computed on FX nodes ('Node' - 'int'); v1 put
    # SymInts into empty_strided's arguments (a free name s77 in the generated code).
    compiled, captured = compile_capture(_empty_column, dynamic=True)
    for shape in [(10, 5), (10, 2), (6, 4), (7, 3)]:
        check(_empty_column, compiled, torch.randn(shape))
    assert captured.report.calls


def _qkv_split(x):
    return corpus.PROGRAMS["qkv_split"].fn(x)


@pytest.mark.parametrize("strategy", ["v1"], indirect=True)
def test_qkv_split_dynamic_inductor(strategy):
    # v1 clones each split view with empty_strided + copy_; its size [s77, 4] reached Inductor as
    # SymInt constants, which its lowering of empty_strided rejects.
    compiled = torch.compile(_qkv_split, backend="inductor", dynamic=True, fullgraph=True)
    check(_qkv_split, compiled, torch.randn(6, 8))
    check(_qkv_split, compiled, torch.randn(5, 8))


# -- the KV-cache model, dynamic ----------------------------------------------------------------


def test_kv_cache_model_dynamic(strategy):
    regs = [autofunc.register(op, strategy=strategy) for op in MUTABLE_OPS]
    try:
        model = TinyDecoder(ModelConfig(layers=1))
        compiled, captured = compile_capture(model, dynamic=True, fullgraph=False)
        for batch in (3, 5):  # one graph for both batch sizes
            config = ModelConfig(layers=1, batch=batch)
            eager, inputs = make_inputs(config), make_inputs(config)
            expected = model(*eager.args())
            got = compiled(*inputs.args())
            assert same_result(got, expected, 1e-4, 1e-4)
            assert same_result(inputs.kv_cache, eager.kv_cache, 1e-4, 1e-4)
        assert len(captured.modules) == 1
        assert captured.report.calls
    finally:
        for r in regs:
            r.remove()


# -- the helpers on their own --------------------------------------------------------------------


def _unbacked(env):
    return env.create_unbacked_symint()


def test_copy_extent_of_a_maybe_empty_view_is_zero_when_empty():
    env = ShapeEnv()
    u0 = _unbacked(env)
    extent = symbolic.copy_extent([u0, 2], [4, 1])
    # 1 + (u0 - 1) * 4 + 1 when u0 >= 1, else 0: min(1, u0) masks it, with no guard installed
    assert not env.guards
    for n, want in [(0, 0), (1, 2), (3, 10)]:
        assert extent.node.expr.subs(u0.node.expr, n) == want
    assert symbolic.copy_extent([3, 0], [4, 1]) == 0
    assert symbolic.copy_extent([3, 2], [4, 1]) == symbolic.span_extent([3, 2], [4, 1]) == 10


def test_contiguity_without_guards():
    env = ShapeEnv()
    u0 = _unbacked(env)
    s0 = env.create_symintnode(
        env.create_symbol(3, ConstantSource("s"), dynamic_dim=DimDynamic.DYNAMIC), hint=3
    )
    with torch._subclasses.FakeTensorMode(shape_env=env):
        t = torch.empty(u0, 2)
        assert symbolic.contiguous_or_false(t)  # decidable: strides (2, 1)
        assert not symbolic.contiguous_or_false(t[:, 1])  # [u0] of stride 2: undecidable
        # a backed stride: torch's is_contiguous_or_false would guard on s0 != 2 here
        assert not symbolic.contiguous_or_false(torch.empty_strided((4, 2), (s0, 1)))
        assert symbolic.contiguous_or_false(torch.empty(4, s0))
    assert not env.guards
    assert symbolic.contiguous_or_false(torch.empty(3, 2)[:, :1]) is False

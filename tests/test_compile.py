"""End-to-end: every corpus program compiled under each strategy matches eager, outputs and the
final values of mutated inputs, through aot_eager, the re-inplace pass (compile_capture) and, for
a chosen subset, Inductor; plus dynamic shapes, inference mode, graph breaks and
nested_compile_region."""

from __future__ import annotations

import pytest
import torch

from autofunc.testing import compile_capture, run_against_eager
from tools import corpus

PROGRAMS = sorted(corpus.PROGRAMS)
INDUCTOR_PROGRAMS = [
    "note_select",
    "input_row",
    "kv_layers",
    "two_overlapping",
    "dst_src_clone",
    "list_arg",
    "list_of_optional_arg",
    "returns_its_argument",
    "returns_its_out",
]
INDUCTOR_PROGRAMS = [p for p in INDUCTOR_PROGRAMS if p in corpus.PROGRAMS]  # torch-dependent


def assert_matches_eager(fn, compiled, make_inputs, *, calls: int = 1):
    """``compiled`` returns what ``fn`` returns and leaves its inputs as ``fn`` does.

    ``calls > 1`` runs it again on fresh inputs (the cached compiled code).
    """
    for _ in range(calls):
        check = run_against_eager(fn, compiled, make_inputs())
        assert check.correct, f"{check.mismatch} differ:\n{check.expected}\n{check.got}"


# -- every program ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROGRAMS)
def test_aot_eager_matches_eager(name, strategy):
    p = corpus.PROGRAMS[name]
    compiled = torch.compile(p.fn, backend="aot_eager", fullgraph=True)
    assert_matches_eager(p.fn, compiled, p.inputs)
    # make_inputs (unseeded): new values on each call, so no constant can be baked in.
    assert_matches_eager(p.fn, compiled, p.make_inputs, calls=2)


@pytest.mark.parametrize("name", PROGRAMS)
def test_reinplaced_matches_eager(name, strategy):
    p = corpus.PROGRAMS[name]
    compiled, captured = compile_capture(p.fn)
    assert_matches_eager(p.fn, compiled, p.inputs)
    assert_matches_eager(p.fn, compiled, p.make_inputs)
    # The pass saw and rewrote every autofunc HOP of the program.
    assert captured.report.calls, "the program should contain at least one autofunc HOP"
    for text in captured.reinplaced:
        assert "autofunc_v" not in text


@pytest.mark.parametrize("name", INDUCTOR_PROGRAMS)
def test_inductor_matches_eager(name, strategy):
    p = corpus.PROGRAMS[name]
    compiled = torch.compile(p.fn, backend="inductor", fullgraph=True)
    assert_matches_eager(p.fn, compiled, p.inputs)
    assert_matches_eager(p.fn, compiled, p.make_inputs)


def test_eager_backend(strategy):
    p = corpus.PROGRAMS["two_disjoint"]
    assert_matches_eager(p.fn, torch.compile(p.fn, backend="eager", fullgraph=True), p.inputs)


# -- dynamic shapes -----------------------------------------------------------------------------

def _dynamic_inputs(name):
    # Different sizes from the seeded inputs, so the compiled code must be size-generic.
    if name == "kv_layers":
        return lambda: (torch.zeros(4, 2, 6, 3), torch.randn(4, 2, 3), torch.tensor([0, 4]))
    return lambda: (torch.randn(5, 3),)  # note_column adds x[0] to a fixed (3, 3) buffer


@pytest.mark.parametrize("name", ["kv_layers", "note_column"])
@pytest.mark.parametrize("mode", ["aot_eager", "capture"])
def test_dynamic(name, mode, strategy):
    p = corpus.PROGRAMS[name]
    if mode == "aot_eager":
        compiled = torch.compile(p.fn, backend="aot_eager", dynamic=True, fullgraph=True)
    else:
        compiled, _ = compile_capture(p.fn, dynamic=True)
    assert_matches_eager(p.fn, compiled, p.inputs)
    assert_matches_eager(p.fn, compiled, _dynamic_inputs(name))


def _slice_of_clone(x):
    buf = x.clone()
    corpus.add_(buf[1:], x[1:])  # the slice's stop is the symbolic size of x
    return buf


@pytest.mark.parametrize(
    "backend, strategy",
    [
        ("capture", "v1"),
        pytest.param("capture", "v2"),
        pytest.param("inductor", "v2"),
    ],
)
def test_dynamic_symbolic_view_bound(backend, strategy):
    # Minimal form of the dynamic-shape bug above: v2's _views holds the SymInt s0.
    regs = corpus.register_all(strategy)
    try:
        if backend == "capture":
            compiled, _ = compile_capture(_slice_of_clone, dynamic=True)
        else:
            compiled = torch.compile(
                _slice_of_clone, backend="inductor", dynamic=True, fullgraph=True
            )
        assert_matches_eager(_slice_of_clone, compiled, lambda: (torch.randn(4, 3),))
        assert_matches_eager(_slice_of_clone, compiled, lambda: (torch.randn(6, 3),))
    finally:
        for r in regs:
            r.remove()


# -- inference mode -----------------------------------------------------------------------------


def _in_inference_mode(fn):
    def run(*args):
        with torch.inference_mode():
            return fn(*args)

    return run


@pytest.mark.parametrize(
    "name, backend",
    [
        ("note_select", "aot_eager"),
        ("kv_layers", "aot_eager"),
        ("input_row", "aot_eager"),
        ("input_row", "inductor"),
    ],
)
def test_inference_mode(name, backend, strategy):
    p = corpus.PROGRAMS[name]
    compiled = torch.compile(p.fn, backend=backend, fullgraph=True)
    make_inputs = _in_inference_mode(p.inputs)
    assert make_inputs()[0].is_inference()
    assert_matches_eager(_in_inference_mode(p.fn), _in_inference_mode(compiled), make_inputs)


# -- graph breaks -------------------------------------------------------------------------------


def _break_on_fresh_buffer(x, y):
    buf = x.clone()
    v = buf[1]
    torch._dynamo.graph_break()
    corpus.add_(v, y)
    return buf


def _break_on_input_view(x, y):
    v = x[1]
    torch._dynamo.graph_break()
    corpus.add_(v, y)
    return x * 2


@pytest.mark.parametrize("fn", [_break_on_fresh_buffer, _break_on_input_view])
@pytest.mark.parametrize("mode", ["aot_eager", "capture"])
def test_graph_break_between_view_and_mutation(fn, mode, strategy):
    # The view is created in one graph and mutated in the next, where it is a graph input.
    captured = None
    if mode == "aot_eager":
        compiled = torch.compile(fn, backend="aot_eager")
    else:
        compiled, captured = compile_capture(fn, fullgraph=False)
    assert_matches_eager(fn, compiled, lambda: (torch.randn(3, 4), torch.randn(4)), calls=2)
    if captured is not None:
        hop_graphs = [g for g in captured.functional if f"autofunc_{strategy}" in g]
        assert len(captured.functional) == 2 and len(hop_graphs) == 1


# -- nested_compile_region ----------------------------------------------------------------------


@torch.compiler.nested_compile_region
def _region(buf, y):
    corpus.add_(buf[0], y)
    return buf.sum()


def _region_on_fresh_buffer(x, y):
    buf = x.clone()
    return buf, _region(buf, y)


def _region_on_input(x, y):
    return _region(x, y) * 2


def _region_twice(x, y):
    # The second call reuses the region's subgraph, which is functionalized by the C++
    # Functionalize kernel autofunc registers (PyTorch's default handling fails here).
    buf = x.clone()
    s = _region(buf, y)
    return buf, s + _region(x, y)


@pytest.mark.parametrize("fn", [_region_on_fresh_buffer, _region_on_input, _region_twice])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_nested_compile_region(fn, backend, strategy):
    compiled = torch.compile(fn, backend=backend, fullgraph=True)
    assert_matches_eager(fn, compiled, lambda: (torch.randn(3, 4), torch.randn(4)))

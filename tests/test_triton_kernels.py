"""User Triton kernels through autofunc's pass (``autofunc.reinplace_triton_kernels``).

Each program launches a kernel with ``torch.library.wrap_triton`` (or from a ``triton_op``) on
CPU tensors: traced against a stub sm90 target so PyTorch's analysis of what the kernel writes
is exact, run under Triton's interpreter (``autofunc.bench.user_triton``). Checked: outputs and
final inputs against eager, which tensors the pass writes in place and which it copies (and
how many bytes), and, for a chosen few, Inductor's post-grad graph with the built-in's bytes
beside autofunc's.
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from torch.library import wrap_triton

import autofunc
from autofunc import Reason, cli
from autofunc.bench import triton_cache
from autofunc.bench import user_triton as ut
from autofunc.hops import triton as triton_adapter
from autofunc.testing import compile_capture, format_graph, run_against_eager

add_into = triton_cache.kernels()["add_into"]
bump_both = triton_cache.kernels()["bump_both"]
add_into_tuned = triton.autotune(
    configs=[triton.Config({"BLOCK": 16}, num_warps=1)], key=["n"]
)(ut.jit(add_into.fn))


CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def triton_on():
    """The switch on, for every test here; on a machine without a GPU the stub target too (on
    a GPU the real driver analyses the kernels)."""
    import contextlib

    autofunc.reinplace_triton_kernels(True)
    with contextlib.nullcontext() if CUDA else ut.gpu_target():
        yield
    autofunc.reinplace_triton_kernels(False)


def _check(program, inputs, **compile_kwargs):
    """Compile ``program(wrap_triton)`` through AOTAutograd with the pass, run it under the
    interpreter against ``program(eager)``; return the captured graphs."""
    compiled, cap = compile_capture(
        program(wrap_triton), before_pass=lambda gm: ut.interpret_kernels(), **compile_kwargs
    )
    check = run_against_eager(program(ut.eager), compiled, inputs)
    assert check.correct, check.mismatch
    return cap


def _post_grad(program, make_inputs):
    """Inductor's post-grad graph of ``program(wrap_triton)`` (what code would be generated
    from), run on CPU with its kernels interpreted, as ``bench/triton_point.py`` does, against
    ``program(eager)``; return the graph and the reports of its compile."""
    with autofunc.inductor.collect_reports() as reports:
        gm = ut.post_grad_graph(program(wrap_triton), make_inputs())
    ut.interpret_kernels()

    def run(*args):
        got = gm(*args)
        return got[0] if isinstance(got, (tuple, list)) and len(got) == 1 else tuple(got)

    check = run_against_eager(program(ut.eager), run, make_inputs())
    assert check.correct, (check.mismatch, format_graph(gm))
    return gm, reports


def _decisions(cap):
    return [(c.op, d.args, d.reason, d.nbytes) for c in cap.report.calls for d in c.decisions]


def _every_layer(K):
    def f(kv, x):
        for layer in range(kv.shape[0]):
            K(add_into)[(1,)](x, kv[layer], x.numel(), BLOCK=16)
        return kv.sum()

    return f


def test_every_layer_of_a_cache_is_written_in_place():
    cap = _check(_every_layer, [torch.randn(3, 16), torch.randn(16)])
    assert [(op, reason) for op, _, reason, _ in _decisions(cap)] == [
        ("triton:_add_into", Reason.INPLACE)
    ] * 3
    assert cap.reinplaced[0] == """\
def forward(self, arg0_1, arg1_1):
    select = torch.ops.aten.select.int(arg0_1, 0, 0)
    triton_kernel_wrapper_mutation = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel_idx = 0, constant_args_idx = 0, grid = [(1, 1, 1)], tma_descriptor_metadata = {}, kwargs = {'src_ptr': arg1_1, 'dst_ptr': select})
    select_3 = torch.ops.aten.select.int(arg0_1, 0, 1)
    triton_kernel_wrapper_mutation_1 = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel_idx = 0, constant_args_idx = 1, grid = [(1, 1, 1)], tma_descriptor_metadata = {}, kwargs = {'src_ptr': arg1_1, 'dst_ptr': select_3})
    select_6 = torch.ops.aten.select.int(arg0_1, 0, 2)
    triton_kernel_wrapper_mutation_2 = torch.ops.higher_order.triton_kernel_wrapper_mutation(kernel_idx = 0, constant_args_idx = 2, grid = [(1, 1, 1)], tma_descriptor_metadata = {}, kwargs = {'src_ptr': arg1_1, 'dst_ptr': select_6})
    sum_1 = torch.ops.aten.sum.default(arg0_1)
    return (sum_1,)"""


def test_the_last_layer_alone():
    def program(K):
        def f(kv, x):
            K(add_into)[(1,)](x, kv[-1], x.numel(), BLOCK=16)

        return f

    cap = _check(program, [torch.randn(4, 16), torch.randn(16)])
    assert [reason for _, _, reason, _ in _decisions(cap)] == [Reason.INPLACE]


def test_one_layer_written_while_another_is_read():
    def program(K):
        def f(kv):
            K(add_into)[(1,)](kv[0], kv[1], kv.shape[1], BLOCK=16)
            return kv[0] * 2

        return f

    cap = _check(program, [torch.randn(3, 16)])
    assert [(args, reason) for _, args, reason, _ in _decisions(cap)] == [
        (("dst_ptr",), Reason.INPLACE)
    ]


def test_a_slice_of_an_intermediate():
    def program(K):
        def f(x, src):
            y = x * 2
            K(add_into)[(1,)](src, y[4:12], 8, BLOCK=8)
            return y

        return f

    cap = _check(program, [torch.randn(16), torch.randn(8)])
    assert [reason for _, _, reason, _ in _decisions(cap)] == [Reason.INPLACE]


def test_a_read_view_overlapping_the_write_copies_the_written_view_alone():
    # The kernel reads kv[0, 0:8] and writes kv[0, 4:12]: written in place, it would read
    # elements it has already written. Only the written view (8 floats) is copied, not the
    # storage from element 0 (clone_preserve_strides would copy 12 floats of a 3 x 16 cache's
    # first row, and PyTorch's decomposition does).
    def program(K):
        def f(kv):
            K(add_into)[(1,)](kv[0, 0:8], kv[0, 4:12], 8, BLOCK=8)

        return f

    cap = _check(program, [torch.randn(3, 16)])
    assert [(reason, nbytes) for _, _, reason, nbytes in _decisions(cap)] == [
        (Reason.READ_BY_CALL, 8 * 4)
    ]


def _read_then_write(K):
    def f(kv, x):
        before = kv[1] * 1  # read before the kernel writes kv[1], used after
        K(add_into)[(1,)](x, kv[1], x.numel(), BLOCK=16)
        return before + kv[1]

    return f


def test_a_read_before_the_call_used_after_it():
    # Through AOTAutograd the graph runs in order: kv[1] is written in place. Inductor's
    # locality reordering moves ``before`` next to its user, after the kernel, so there the
    # clone of kv[1] (that layer alone) stays; the built-in copies two layers (from element 0).
    cap = _check(_read_then_write, [torch.randn(3, 16), torch.randn(16)])
    assert [reason for _, _, reason, _ in _decisions(cap)] == [Reason.INPLACE]
    gm, reports = _post_grad(_read_then_write, lambda: [torch.randn(3, 16), torch.randn(16)])
    assert [d.reason for r in reports for d in r.decisions] == [Reason.READ_LATER]
    ours = ut.allocated_bytes(gm)
    autofunc.reinplace_triton_kernels(False)
    gm, _ = _post_grad(_read_then_write, lambda: [torch.randn(3, 16), torch.randn(16)])
    builtin = ut.allocated_bytes(gm)
    assert (ours, builtin) == (16 * 4, 2 * 16 * 4)


def _two_pointers(K):
    def f(x):
        K(bump_both)[(1,)](x, x, x.numel(), BLOCK=16)
        return x.sum()

    return f


def test_the_same_tensor_as_two_written_pointers():
    # Note [One tensor passed as two written pointers]: eager writes x through both pointers
    # (11 everywhere); the functional graph keeps only the last pointer's copy (10), and so
    # does PyTorch's own handling (pytorch#196657). The eager values tracing recorded show
    # one tensor: one buffer, both pointers write it, eager's result.
    cap = _check(_two_pointers, [torch.zeros(16)])
    (call,) = cap.report.calls
    assert [(d.args, d.reason) for d in call.decisions] == [
        (("a_ptr", "b_ptr"), Reason.INPLACE)
    ]
    assert "pytorch#196657" not in call.note
    gm, reports = _post_grad(_two_pointers, lambda: [torch.zeros(16)])  # eager's 11s
    assert [d.reason for r in reports for d in r.decisions] == [Reason.INPLACE]
    assert ut.allocated_bytes(gm) == 0


def test_two_pointers_without_recorded_eager_values_keep_the_graphs_meaning():
    # A graph whose node lost its eager values (built by hand, another pass): one tensor or a
    # removed clone cannot be told apart, so each pointer keeps a copy of its own as the graph
    # says (one of them in place), and the report says what that means.
    def drop_eager_values(gm):
        ut.interpret_kernels()
        for n in gm.graph.nodes:
            n.meta.pop("eager_input_vals", None)

    compiled, cap = compile_capture(_two_pointers(wrap_triton), before_pass=drop_eager_values)
    x = torch.zeros(16)
    compiled(x)
    assert torch.equal(x, torch.full((16,), 10.0))  # the graph's meaning (pytorch#196657)
    (call,) = cap.report.calls
    assert [(d.args, d.reason) for d in call.decisions] == [
        (("a_ptr",), Reason.INPLACE),
        (("b_ptr",), Reason.SAME_BUFFER_TWICE),
    ]
    assert "pytorch#196657" in call.note


def test_a_clone_inductor_removes_keeps_both_pointers_apart():
    # y = x.clone() is a no-op to Inductor (remove_noop_ops), so the kernel's two pointers
    # reach the pass as one node, which must not be written as one buffer: x gets +1, y +10.
    def program(K):
        def f(x):
            y = x.clone()
            K(bump_both)[(1,)](x, y, x.numel(), BLOCK=16)
            return x * 1, y * 1

        return f

    _check(program, [torch.zeros(16)])
    gm, reports = _post_grad(program, lambda: [torch.zeros(16)])  # x + 1, y + 10, as eager
    (call,) = [c for r in reports for c in r.calls]
    assert [d.reason for d in call.decisions] == [Reason.INPLACE, Reason.SAME_BUFFER_TWICE]
    (launch,) = gm.graph.find_nodes(
        op="call_function", target=torch.ops.higher_order.triton_kernel_wrapper_mutation
    )
    a, b = (launch.kwargs["kwargs"][k] for k in ("a_ptr", "b_ptr"))
    assert a is not b and b.target is torch.ops.aten.clone.default


def test_an_autotuned_kernel():
    def program(K):
        def f(kv, x):
            for layer in range(kv.shape[0]):
                K(add_into_tuned)[lambda meta: (1,)](x, kv[layer], x.numel())

        return f

    cap = _check(program, [torch.randn(2, 16), torch.randn(16)])
    assert [reason for _, _, reason, _ in _decisions(cap)] == [Reason.INPLACE] * 2


@torch.library.triton_op("autofunc_test_triton::add_into", mutates_args={"dst"})
def add_into_op(src: torch.Tensor, dst: torch.Tensor) -> None:
    wrap_triton(add_into)[(1,)](src, dst, src.numel(), BLOCK=16)


def test_a_triton_op():
    def program(K):
        def f(kv, x):
            for layer in range(kv.shape[0]):
                if K is wrap_triton:
                    add_into_op(x, kv[layer])
                else:
                    K(add_into)[(1,)](x, kv[layer], x.numel(), BLOCK=16)

        return f

    cap = _check(program, [torch.randn(3, 16), torch.randn(16)])
    assert [(op, reason) for op, _, reason, _ in _decisions(cap)] == [
        ("triton:_add_into", Reason.INPLACE)
    ] * 3


def test_off_leaves_the_calls_to_inductor():
    autofunc.reinplace_triton_kernels(False)
    compiled, cap = compile_capture(
        _every_layer(wrap_triton), before_pass=lambda gm: ut.interpret_kernels()
    )
    check = run_against_eager(
        _every_layer(ut.eager), compiled, [torch.randn(3, 16), torch.randn(16)]
    )
    assert check.correct, check.mismatch
    assert not [c for c in cap.report.calls if c.strategy == "triton"]
    # the three launches reach the graph the pass leaves, still functional
    assert cap.reinplaced[0].count("triton_kernel_wrapper_functional(") == 3
    assert "triton_kernel_wrapper_mutation" not in cap.reinplaced[0]
    # and under Inductor: its own re-inplacing handles them, with eager's result
    gm, reports = _post_grad(_every_layer, lambda: [torch.randn(3, 16), torch.randn(16)])
    assert not [c for r in reports for c in r.calls if c.strategy == "triton"]
    assert format_graph(gm).count("triton_kernel_wrapper_mutation(") == 3
    # the built-in's copies, each layer's from element 0: (3 + 1) / 2 caches of 3 x 16 floats
    assert ut.allocated_bytes(gm) == 3 * 16 * 4 * (3 + 1) // 2


def test_a_report_says_when_every_tensor_counts_as_written():
    def program(K):
        def f(x):
            K(bump_both)[(1,)](x[:8], x[8:], 8, BLOCK=8)

        return f

    cap = _check(program, [torch.randn(16)])
    (call,) = cap.report.calls
    assert "every tensor argument counts as written" in call.note
    assert "note on" in str(cap.report)


# -- Inductor's post-grad graph: what code would be generated from, built-in beside autofunc --


@pytest.mark.parametrize("layers", [1, 3])
def test_inductor_copies_no_cache(layers):
    kv, x = torch.randn(layers, 16), torch.randn(16)
    autofunc.reinplace_triton_kernels(False)
    builtin = ut.allocated_bytes(ut.post_grad_graph(_every_layer(wrap_triton), [kv, x]))
    autofunc.reinplace_triton_kernels(True)
    gm = ut.post_grad_graph(_every_layer(wrap_triton), [kv, x])
    cache = kv.numel() * kv.element_size()
    # the built-in copies the storage from element 0 to the end of each layer: (L+1)/2 caches
    assert builtin == cache * (layers + 1) // 2
    assert ut.allocated_bytes(gm) == 0
    code = format_graph(gm)
    assert "triton_kernel_wrapper_functional" not in code
    assert code.count("triton_kernel_wrapper_mutation(") == layers


def test_adapter_state_is_in_the_cache_key():
    from autofunc.inductor import ReinplacePass

    on = ReinplacePass().uuid()
    autofunc.reinplace_triton_kernels(False)
    assert ReinplacePass().uuid() != on
    assert not triton_adapter.enabled()


# -- the project's reshape_and_cache kernel through wrap_triton (the bench case) -------------


def test_reshape_and_cache_through_wrap_triton_writes_every_layer_in_place():
    from autofunc.kernels.reshape_and_cache import _reshape_and_cache_kernel

    kernel = ut.jit(_reshape_and_cache_kernel.fn)

    def program(K):
        if K is wrap_triton:
            return triton_cache.step(wrap_triton, kernel)
        return triton_cache.step(lambda k: k, ut.eager(kernel))

    cap = _check(program, triton_cache.inputs(3))
    decisions = _decisions(cap)
    assert [args for _, args, _, _ in decisions] == [("key_cache_ptr",), ("value_cache_ptr",)] * 3
    assert {reason for _, _, reason, _ in decisions} == {Reason.INPLACE}


def test_bench_case_bytes_per_step(tmp_path):
    row = triton_cache.measure(2)
    # key and value views per layer, each copied from element 0: 1/4 + 2/4 + 3/4 + 4/4 caches
    assert row["builtin_bytes"] == row["cache_bytes"] * 5 // 2
    assert row["autofunc_bytes"] == 0
    out = tmp_path / "t.json"
    assert cli.main(["bench-triton", "--layers", "1", "--json", str(out)]) == 0
    assert '"autofunc_bytes": 0' in out.read_text()


def test_explain_shows_kernels_beside_custom_op_calls():
    from tools import corpus

    ut.preload(add_into)

    def f(kv, x):
        corpus.add_(kv[0], x)
        wrap_triton(add_into)[(1,)](x, kv[1], x.numel(), BLOCK=16)

    kv, x = torch.randn(2, 16), torch.randn(16)
    expected = kv.clone()
    expected[0] += x
    expected[1] += x
    report = autofunc.explain(f, kv, x, backend="aot_eager", ops=[corpus.add_])
    assert [(c.op, c.strategy) for c in report.calls] == [
        ("autofunc_corpus::add_.default", "v2"),
        ("triton:_add_into", "triton"),
    ]
    assert report.num_clones == 0
    assert torch.allclose(kv, expected)


def test_bench_cases_never_copy_more_than_the_builtin():
    rows = {r["case"]: (r["builtin_bytes"], r["autofunc_bytes"]) for r in triton_cache.compare_cases()}
    assert rows == {
        "kv[l] for every layer (4)": (640, 0),  # 1/4 + 2/4 + 3/4 + 4/4 of a 256 B cache
        "the last layer alone": (256, 0),
        "kv[1] written, kv[0] read": (128, 0),
        "a slice of an intermediate": (64, 0),
        "a read view overlapping the write": (112, 32),  # the written 8 floats alone
        "a read before, used after": (128, 64),  # that layer alone
        "one tensor as two written pointers": (64, 0),  # the built-in's result is wrong
    }


def test_dynamic_shapes_and_a_recompile():
    # A second size recompiles: the kernel in the side table must still be analysable then.
    def program(K):
        def f(kv, x):
            for layer in range(kv.shape[0]):
                K(add_into)[((x.numel() + 15) // 16,)](x, kv[layer], x.numel(), BLOCK=16)
            return kv[0] * 2

        return f

    for n in (16, 40):
        cap = _check(program, [torch.randn(3, n), torch.randn(n)], dynamic=True)
        assert [(args, reason) for _, args, reason, _ in _decisions(cap)] == [
            (("dst_ptr",), Reason.INPLACE)
        ] * 3


def test_a_training_graph():
    def program(K):
        def f(kv, x, w):
            K(add_into)[(1,)](x, kv[1], x.numel(), BLOCK=16)
            return (kv[1] * w).sum()

        return f

    w = torch.randn(16, requires_grad=True)
    cap = _check(program, [torch.randn(3, 16), torch.randn(16), w])
    assert [reason for _, _, reason, _ in _decisions(cap)] == [Reason.INPLACE]


def test_a_leaked_interpreter_patch_is_undone():
    # Note [Triton's interpreter leaves triton.language patched]: a device-function call under
    # the interpreter leaves the language patched; the write analysis must still be exact.
    from triton.runtime import interpreter

    interpreter._patch_lang(ut._language_snapshot)  # patches triton.language and tl.core, for good
    assert not triton.language.core.is_builtin(triton.language.core.mul)
    with ut.gpu_target():
        assert triton.language.core.is_builtin(triton.language.core.mul)
        cap = _check(_every_layer, [torch.randn(2, 16), torch.randn(16)])
    assert [args for _, args, _, _ in _decisions(cap)] == [("dst_ptr",)] * 2


# -- on a GPU: Inductor generates the code, the kernels run for real ---------------------------


@pytest.mark.skipif(not CUDA, reason="Inductor generates code for a user Triton kernel on a GPU")
@pytest.mark.parametrize("case", list(triton_cache._case_programs()))
def test_cases_under_inductor_on_cuda(case):
    program, make_inputs = triton_cache._case_programs()[case]
    kernels = triton_cache.kernels()
    inputs = [t.cuda() for t in make_inputs()]
    eager_inputs = [t.clone() for t in inputs]
    expected = program(lambda k: k, kernels)(*eager_inputs)
    torch._dynamo.reset()
    # the CPU tests swapped interpreted kernels into the side table: start from the real ones
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    kernel_side_table.reset_table()
    with autofunc.inductor.collect_reports() as reports:
        got = torch.compile(program(wrap_triton, kernels), fullgraph=True)(*inputs)
    torch.cuda.synchronize()
    for a, b in zip(inputs, eager_inputs):
        torch.testing.assert_close(a, b)
    if expected is not None:
        torch.testing.assert_close(got, expected)
    assert [c.strategy for r in reports for c in r.calls], "no kernel call reached the pass"


@pytest.mark.skipif(not CUDA, reason="measured on a GPU")
def test_bench_case_measured_on_cuda():
    row = triton_cache.measure(4, "cuda")
    assert row["autofunc_bytes"] < row["builtin_bytes"]
    assert row["autofunc_bytes"] <= row["cache_bytes"] // 4  # no whole cache, let alone L + 1/2

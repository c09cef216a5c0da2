"""Regions that write their inputs (``nested_compile_region`` called more than once, so it stays
an ``invoke_subgraph``): PyTorch wraps each call in its own ``auto_functionalized_v2``, which
autofunc's pass decides through ``hops/subgraph.py`` and whose writes it declares to Inductor
(Note [Writes Inductor cannot see]). Checked against eager under Inductor, with the reports
and the bytes of the post-grad graph."""

import pytest
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

import autofunc
from autofunc.bench.user_triton import allocated_bytes, post_grad_graph
from autofunc.inductor import collect_reports
from autofunc.testing import format_graph, run_against_eager
from tools import corpus

pytestmark = pytest.mark.skipif(
    not hasattr(torch.compiler, "nested_compile_region"), reason="no nested_compile_region"
)


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    reg = autofunc.register(corpus.add_, strategy=request.param)
    yield request.param
    reg.remove()


def _region(fn):
    return torch.compiler.nested_compile_region(fn)


@_region
def _block(h, kv_l):
    corpus.add_(kv_l[0], h)  # write this layer's K row
    return h * 2 + kv_l[1]  # read its V row


@_region
def _block_two_rows(h, kv_l):
    corpus.add_(kv_l[0], h)
    corpus.add_(kv_l[1], h * 0.5)
    return h + 1


def read_before(h, kv):
    before = kv[1, 0] * 2  # the old value of a row the second region writes, used at the end
    for layer in range(kv.shape[0]):
        h = _block(h, kv[layer])
    return h, before + 1


def read_after(h, kv):
    for layer in range(kv.shape[0]):
        h = _block(h, kv[layer])
    return h, kv[0, 0] + kv[1, 1]  # the new K row of layer 0, the untouched V row of layer 1


def computed_cache(h, kv):
    cache = kv * 1  # a buffer the graph computes, written through views
    for layer in range(cache.shape[0]):
        h = _block(h, cache[layer])
    return h, cache


def writes_two_rows(h, kv):
    # (Dynamo refuses a region given two views of one tensor: its inputs may not alias)
    first = kv[2, 1] * 1  # the old V row of the last layer, after the first region
    for layer in range(kv.shape[0]):
        h = _block_two_rows(h, kv[layer])
    return h, first


def old_value_read_after(h, kv):
    old = kv[0].clone()  # eager's copy of layer 0, taken before the region writes it
    for layer in range(kv.shape[0]):
        h = _block(h, kv[layer])
    return h, old


def outputs_unused(h, kv):
    # fuzz seed 20261259 #32: Inductor drops an invoke_subgraph whose outputs nothing uses,
    # writes and all, unless the declaration after it takes them (Note [Writes Inductor
    # cannot see])
    for layer in range(kv.shape[0]):
        _block(h, kv[layer])
    return (h * 2,)


PROGRAMS = [
    read_before,
    read_after,
    computed_cache,
    writes_two_rows,
    old_value_read_after,
    outputs_unused,
]


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(8), torch.randn(3, 2, 8)]


def _compile_and_check(fn):
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
        collect_reports() as reports,
    ):
        torch._dynamo.reset()
        check = run_against_eager(fn, torch.compile(fn, fullgraph=True), _inputs())
    assert check.correct, check.mismatch
    return [c for r in reports for c in r.calls if c.strategy == "region"]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_region_calls_match_eager(fn, strategy):
    calls = _compile_and_check(fn)
    assert len(calls) == 3, calls  # one per layer: the region stays a call
    assert all(c.op.startswith("invoke_subgraph:") for c in calls)


@pytest.mark.parametrize("fn", [read_before, read_after, computed_cache, writes_two_rows])
def test_region_calls_write_in_place(fn, strategy):
    calls = _compile_and_check(fn)
    decisions = [d for c in calls for d in c.decisions]
    assert decisions and all(d.inplace for d in decisions), [d.explain() for d in decisions]


def test_an_old_value_returned_is_computed_before_the_region(strategy):
    calls = _compile_and_check(old_value_read_after)
    decisions = [d for c in calls for d in c.decisions]
    # ``old``, returned, is computed where it stands, before the first region writes layer 0
    # (Note [Returned values Inductor computes where they stand]): no copy of the cache, and
    # nothing computed early
    assert all(d.inplace for d in decisions), [d.explain() for d in decisions]
    assert decisions[0].detail == "", decisions[0].explain()


def old_value_summed_after(h, kv):
    old = kv[0] * 1  # read after the regions: would read layer 0 after the first one wrote it
    for layer in range(kv.shape[0]):
        h = _block(h, kv[layer])
    return h, old + h


def test_an_old_value_read_after_is_computed_before_the_region(strategy):
    calls = _compile_and_check(old_value_summed_after)
    decisions = [d for c in calls for d in c.decisions]
    # it is computed before that region instead of a copy of the cache
    assert all(d.inplace for d in decisions), [d.explain() for d in decisions]
    assert "computed before the call" in decisions[0].detail, decisions[0].explain()


def test_writes_are_declared_around_the_region_for_inductor(strategy):
    gm = post_grad_graph(read_before, _inputs())
    code = format_graph(gm)
    lines = [ln.strip() for ln in code.splitlines() if "invoke_subgraph(" in ln or "written" in ln]
    kinds = ["written" if "autofunc.written" in ln else "region" for ln in lines]
    assert kinds == ["written", "region", "written"] * 3, code
    # the regions write the cache itself: nothing is allocated but the outputs
    assert allocated_bytes(gm) == 0, code


def test_the_switch_leaves_regions_to_pytorch(strategy):
    autofunc.reinplace_nested_regions(False)
    try:
        with (
            inductor_config.patch(fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
            collect_reports() as reports,
        ):
            torch._dynamo.reset()
            check = run_against_eager(
                read_after, torch.compile(read_after, fullgraph=True), _inputs()
            )
        gm = post_grad_graph(read_after, _inputs())
    finally:
        autofunc.reinplace_nested_regions(True)
    assert check.correct, check.mismatch
    # the pass ran: it decided the registered op inside the region's subgraph (one call), and
    # left the regions themselves, in the outer graph, to PyTorch
    calls = [(c.strategy, c.op) for r in reports for c in r.calls]
    assert calls == [(strategy, "autofunc_corpus::add_.default")], calls
    code = format_graph(gm)
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert sum("invoke_subgraph" in t.lower() for t in targets) == 3, code
    assert not [t for t in targets if "autofunc" in t], code  # no write declared, no direct call


def test_the_adapter_reads_view_entries(strategy):
    import autofunc.backends.inductor.glue as glue
    from autofunc.hops.subgraph import SubgraphAdapter

    read = []
    real = glue.reinplace

    def spy(gm, **kwargs):
        nodes = gm.graph.find_nodes(
            op="call_function", target=torch.ops.higher_order.auto_functionalized_v2
        )
        read.extend(SubgraphAdapter().read(n) for n in nodes)
        return real(gm, **kwargs)

    glue.reinplace = spy
    try:
        with inductor_config.patch(fx_graph_cache=False):
            torch._dynamo.reset()
            torch.compile(writes_two_rows, fullgraph=True)(*_inputs())
    finally:
        glue.reinplace = real
    assert len(read) == 3
    m = read[1]
    assert m.strategy == "region" and len(m.buffers) == 1
    # kv[1] of the (3, 2, 8) cache, which PyTorch records as as_strided((2, 8), (8, 1), 16):
    # read as the select it is (Note [Region views as selects])
    assert [(s.arg, str(s.relative_chain)) for s in m.slots] == [("arg0", "[1]")]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_region_calls_through_the_pass_alone(fn, strategy):
    # the pass on AOTAutograd's graph (the generic policy: the graph runs as it stands, no
    # declared writes), and the rewritten graph is what runs
    from autofunc.testing import compile_capture

    torch._dynamo.reset()
    compiled, captured = compile_capture(fn)
    check = run_against_eager(fn, compiled, _inputs())
    assert check.correct, check.mismatch
    calls = [c for c in captured.report.calls if c.strategy == "region"]
    assert len(calls) == 3
    assert "invoke_subgraph" in captured.reinplaced[0]
    assert "autofunc.written" not in captured.reinplaced[0]
    assert all(d.inplace for c in calls for d in c.decisions), captured.report


@pytest.mark.parametrize("fn", [read_before, old_value_read_after], ids=lambda f: f.__name__)
def test_region_calls_with_dynamic_shapes(fn, strategy):
    # Note [Region views as selects]: kv[l] as as_strided with a symbolic offset lands on
    # layer 0 under Inductor (PyTorch's own decomposition is wrong so); as a select it is right
    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
        collect_reports() as reports,
    ):
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, dynamic=True)
        check = run_against_eager(fn, compiled, _inputs())
    assert check.correct, check.mismatch
    calls = [c for r in reports for c in r.calls if c.strategy == "region"]
    assert len(calls) == 3 and all(d.inplace for c in calls for d in c.decisions)


def _check_with_fuzz_ops(fn, strategy, *inputs):
    """``fn`` (calling the fuzzer's ops and regions) under Inductor against eager: outputs
    and the final values of the inputs."""
    from tools import fuzzing as fuzz

    with autofunc.override(strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        check = run_against_eager(fn, torch.compile(fn, fullgraph=True), list(inputs))
    assert check.correct, check.mismatch


# -- fuzz seed 20261261 #242: a strided buffer Inductor computes, given to a region twice --


def strided_computed_buffer(b):
    from tools import fuzzing as fuzz

    r0 = b * -2.0
    v3 = b[0:2]  # b itself: a slice_scatter writes it back, recorded with b's stride 2
    v3.add_(v3.sum() * -2.0)
    fuzz.REGIONS.m1(v3, r0)
    fuzz.REGIONS.m1(b, r0)
    return ()


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_region_operands_get_fixed_layouts(fuzz_strategy):
    # Note [Region operands keep no computed layout]: without it Inductor refuses the graph
    # ("subgraph args must have consistent values"), and with only the copy the rule "a layout
    # the backend chooses" asks for the region wrote Inductor's copy of its operand
    torch.manual_seed(0)
    b = torch.randn(4, dtype=torch.float64)[::2]
    _check_with_fuzz_ops(strided_computed_buffer, fuzz_strategy, b)


# -- fuzz seed 20261270 #252: a region's base that an earlier call wrote into an offset input --


def base_written_before_the_region(a, b):
    from tools import fuzzing as fuzz

    fuzz.m2(b, b, b)
    v0 = b.permute(0, 1)
    fuzz.m3way(v0, b, a)  # b's new value: a fresh tensor at offset 0 as traced, then b itself
    t2 = torch.ones(24, dtype=torch.float64)
    g3 = fuzz.REGIONS.m1(v0, t2)
    fuzz.REGIONS.m1(g3, t2)
    return (v0,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_region_view_entries_count_from_the_traced_base(fuzz_strategy):
    # Note [Region view entries count from the base as traced]: read against the input (at
    # offset 4) the entry pointed before it: heap corruption under v1, a wrong result under v2
    torch.manual_seed(0)
    a, b = torch.randn(2, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)[1:]
    _check_with_fuzz_ops(base_written_before_the_region, fuzz_strategy, a, b)


# -- fuzz seed 20261270 #142: slice entries of a base at a storage offset ----------------------


def regions_on_slices_of_an_offset_input(a, y):
    from tools import fuzzing as fuzz

    g = fuzz.REGIONS.m1(a[0:3], y)  # PyTorch records elements 1 to 4: a[1:4]
    h = fuzz.REGIONS.m1(a[4:7], y)
    return (g, h)


def region_on_a_slice_past_the_base(a, y):
    from tools import fuzzing as fuzz

    v0, v1 = a.split([3, 3])
    g = fuzz.REGIONS.m1(v1, y)  # recorded as elements 4 to 7 of 6: traced on two of them
    h = fuzz.REGIONS.m1(v0, y)
    return (g, h)


def _offset_input(n):
    torch.manual_seed(0)
    return torch.randn(n + 1, dtype=torch.float64)[1:], torch.randn(3, dtype=torch.float64)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_region_slice_entries_count_from_the_base(fuzz_strategy):
    # Note [Region slice entries count from the storage]: PyTorch's own entries write a[1:4]
    # for a[0:3] (wrong under aot_eager, and under Inductor before the fix)
    _check_with_fuzz_ops(regions_on_slices_of_an_offset_input, fuzz_strategy, *_offset_input(11))


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_region_traced_on_a_clamped_slice_is_refused(fuzz_strategy):
    # the region's graph was traced on two elements of a three-element operand: an error that
    # names the region and the argument, not Inductor's "subgraph args must have consistent
    # values" (nor a wrong result)
    from tools import fuzzing as fuzz

    fn = region_on_a_slice_past_the_base
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=r"argument 'arg0' of op invoke_subgraph:.*2-element"):
            torch.compile(fn, fullgraph=True)(*_offset_input(6))


# -- fuzz seed 20261278 #408, #617: a base whose value changed layout before the region -------


def view_made_before_the_input_was_replaced(a):
    from tools import fuzzing as fuzz

    v0 = a[1, :, None]  # made on the strided input: recorded at offset 48 of stride 48
    a.mul_(2.0)  # a's value: a fresh, dense tensor (stride 24)
    r1 = v0.cumsum(0)
    g = fuzz.REGIONS.m1(v0, r1)
    fuzz.REGIONS.m1(g, r1)
    return (g,)


def view_made_before_an_ambiguous_move(a):
    from tools import fuzzing as fuzz

    v0 = a[1:3:2]  # recorded at storage offset 2 of the input at offset 1
    fuzz.m2(v0, v0, v0)  # a's value: a fresh tensor at offset 0, where 2 is a view too
    r3 = v0.sum(0) * 1.5
    fuzz.REGIONS.m1(v0, r3)
    fuzz.REGIONS.m1(v0, r3)
    return ()


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_region_view_made_before_its_base_changed_layout(fuzz_strategy):
    # Note [Where a region's view entries count from]: read against the dense value at the
    # call, the entry (offset 48) was outside it; PyTorch's own handling fails too
    torch.manual_seed(0)
    a = torch.randn(2, 12, 4, dtype=torch.float64)[:, :6]
    _check_with_fuzz_ops(view_made_before_the_input_was_replaced, fuzz_strategy, a)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_region_view_of_unknown_origin_is_refused(fuzz_strategy):
    # both the input's offset (1) and the fresh value's (0) fit the entry, and they name
    # different elements: an error naming the region and the argument (it was a wrong result)
    from tools import fuzzing as fuzz

    fn = view_made_before_an_ambiguous_move
    a = torch.randn(4, dtype=torch.float64)[1:]
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        with pytest.raises(Exception, match=r"argument 'arg0' of op invoke_subgraph:.*not say"):
            torch.compile(fn, fullgraph=True)(a)


# -- fuzz seed 20261286 #230: a strided read operand of a region, realized for the second call --


def strided_read_operand_of_two_regions(b):
    from tools import fuzzing as fuzz

    t1 = b.clone()
    v2 = t1[3:6:2]  # read by both calls; the first writes b
    g4 = fuzz.REGIONS.m1(b, v2)
    fuzz.REGIONS.m1(g4, v2)
    return (t1, g4)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_strided_read_operand_of_a_region_keeps_its_layout(fuzz_strategy):
    # _restrided_for_a_later_region in backends/inductor/lazy_reads.py: realized densely for the
    # second call, the operand had two layouts and Inductor raised "subgraph args must have
    # consistent values"
    torch.manual_seed(0)
    _check_with_fuzz_ops(
        strided_read_operand_of_two_regions, fuzz_strategy, torch.randn(6).double()
    )

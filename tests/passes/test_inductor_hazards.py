"""Programs Inductor miscompiles around mutable custom ops unless the pass guards them: checked
against eager under Inductor (outputs, final inputs, and whether a returned tensor shares its
storage with an input)."""

import pytest
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

import autofunc
from autofunc.reports import collect_reports
from autofunc.testing import run_against_eager
from tools import corpus
from tools import fuzzing as fuzz  # the autofunc_fuzz ops

from tests.inductor_code import views_past_their_buffers


@torch.library.custom_op("autofunc_hazards::add_one", mutates_args={"x"})
def add_one(x: torch.Tensor) -> None:
    x.add_(1)


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    reg = autofunc.register(add_one, strategy=request.param)
    yield request.param
    reg.remove()


def _tensors(out):
    return [t for t in (out if isinstance(out, tuple) else (out,)) if isinstance(t, torch.Tensor)]


def _aliases_input(outs, inputs):
    ptrs = {t.untyped_storage().data_ptr() for t in inputs}
    return [o.untyped_storage().data_ptr() in ptrs for o in _tensors(outs)]


def check_inductor(fn, *inputs):
    check = run_against_eager(fn, torch.compile(fn, fullgraph=True), inputs)
    assert check.correct, check.mismatch
    assert _aliases_input(check.got, check.inputs) == _aliases_input(
        check.expected, check.eager_inputs
    )


def check_fuzz_ops(fn, strategy, *inputs):
    """``check_inductor`` of ``fn`` with the fuzzer's ops registered with ``strategy``."""
    with autofunc.override(strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        check_inductor(fn, *inputs)


def _grid():
    return torch.arange(12.0).view(3, 4)


# -- an input copied elsewhere, then mutated by the op (pytorch#198131 class) -----------------


def copy_then_mutate(dst, src):
    dst[:] = src[:, :]  # remove_noop_ops turns the copy of src into src itself
    add_one(src)
    return src


def test_copy_of_input_then_op_mutates_it(strategy):
    check_inductor(copy_then_mutate, torch.zeros(3, 4), _grid())


# Note [Copies moved before the writes]: the copy into dst moves before the call, which then
# writes src in place; where dst is read later, or src is written before, the copy stays.


def copy_then_mutate_row(dst, src):
    dst[:] = src
    add_one(src[1])


def read_dst_copy_then_mutate(dst, src):
    before = dst * 2  # a lazy read of dst's old value, before the copy
    dst[:] = src
    add_one(src[1])
    return before


def copy_then_mutate_then_read_dst(dst, src):
    dst[:] = src
    add_one(src[1])
    return dst + 1  # dst holds src's old value


def copy_then_mutate_both(dst, src):
    dst[:] = src
    add_one(src[1])
    add_one(dst[0])  # dst is written after src was, from src's old value


def mutate_then_copy(dst, src):
    add_one(src[1])
    dst[:] = src  # the new value: nothing to move
    return dst.sum()


@pytest.mark.parametrize(
    "fn, clones",
    [
        (copy_then_mutate_row, 0),
        (read_dst_copy_then_mutate, 0),
        (copy_then_mutate_then_read_dst, None),  # dst + 1 is a lazy read of src's old value
        # the second call writes dst's value, which Inductor's remove_noop_ops has made src's
        # old value itself: it needs a copy of it (the one the program makes into dst)
        (copy_then_mutate_both, None),
        (mutate_then_copy, 0),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_copy_of_an_input_moves_before_the_call(strategy, fn, clones):
    from autofunc.inductor import collect_reports

    with inductor_config.patch(fx_graph_cache=False), collect_reports() as reports:
        check_inductor(fn, torch.zeros(3, 4), _grid())
    assert reports  # compiled here, not served from a cache
    if clones is not None:
        assert sum(r.num_clones for r in reports) == clones


# -- a scatter result the op mutates, copied back into the input and returned (#195451 class) -


def returned_row_write(x):
    y = x.clone()
    add_one(y[0])
    x.copy_(y)
    return y


def returned_select_scatter(x):
    y = torch.select_scatter(x, x[0] * 2, 0, 0)
    add_one(y[1])
    x.copy_(y)
    return y


def returned_scatter_mutated_whole(x):
    y = torch.select_scatter(x, x[0] * 2, 0, 0)
    add_one(y)
    x.copy_(y)
    return y


def returned_view_of_scatter(x):
    y = x.clone()
    y[0] = 3.0
    add_one(y[1])
    x.copy_(y)
    return y[1:]


@pytest.mark.parametrize(
    "fn",
    [
        returned_row_write,
        returned_select_scatter,
        returned_scatter_mutated_whole,
        returned_view_of_scatter,
    ],
)
def test_returned_value_copied_back_is_not_the_input(strategy, fn):
    check_inductor(fn, _grid())


def test_returned_value_copied_back_is_copied_at_the_end():
    """The pass alone, on the graph Inductor hands it (its ``remove_noop_ops`` has dropped the
    clone of ``x``): ``x`` is written in place and the returned ``y``, which is the value copied
    back, is copied at the end (Note [Returned values of written inputs]), not cloned before
    the call."""
    from autofunc.testing import compile_capture

    def drop_noops(gm):  # what remove_noop_ops does to this graph: clone(x) -> x, copy(x, y) -> y
        aten = torch.ops.aten
        for n in list(gm.graph.nodes):
            if n.target in (aten.clone.default, aten.copy.default):
                n.replace_all_uses_with(n.args[-1] if n.target is aten.copy.default else n.args[0])
                gm.graph.erase_node(n)

    reg = autofunc.register(add_one, strategy="v2")
    try:
        compiled, captured = compile_capture(returned_row_write, before_pass=drop_noops)
        x = _grid()
        out = compiled(x)
    finally:
        reg.remove()
    assert [d.reason for d in captured.report.decisions] == [autofunc.Reason.INPLACE]
    assert "clone" in captured.reinplaced[0].splitlines()[-2]  # the copy, just before return
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert torch.equal(out, x)


# -- fuzz regressions: a span clone of a view of a buffer Inductor lays out itself -------------

ops = torch.ops.autofunc_fuzz


def fuzz_seed6_66(a):
    v2 = a.permute(1, 0)
    v3, v4 = v2.split([1, 3], 1)
    ops.mlate(v4, v3)
    ops.m3([a, a, a], a)
    return ()


def fuzz_seed1234_203(a, b):
    v0 = b.transpose(0, 2)
    v1, v2 = v0.split([3, 2], 0)
    ops.m3([v2, a], v1)
    ops.m2(v2, v2, b)
    return ()


@pytest.mark.parametrize(
    "fn, make_inputs",
    [
        (fuzz_seed6_66, lambda: (torch.randn(8, 5, dtype=torch.float64)[::2],)),
        (
            fuzz_seed1234_203,
            lambda: (
                torch.randn(4, dtype=torch.float64),
                torch.randn(6, 5, 5, dtype=torch.float64)[::2],
            ),
        ),
    ],
    ids=["seed6_66", "seed1234_203"],
)
def test_span_clone_of_computed_buffer(fn, make_inputs):
    with autofunc.override("v1", fuzz.OPS):
        torch.manual_seed(0)
        check_inductor(fn, *make_inputs())


# -- a lazy read of an input at a nonzero storage offset (fuzz seed 20261124 #103) ------------


def reduce_between_writes(a):
    v = a[4:5]
    add_one(v)
    r = v.amax() + v.mean()  # computed by Inductor where it is needed: after the second write
    add_one(v)
    return r


def test_lazy_read_of_an_input_at_an_offset(strategy):
    # The HOP's new base sits at storage offset 0 where the input it replaces sits at 1: the
    # read of the new value's [4:5] must still be seen as reading what the next call writes.
    a = torch.randn(7, dtype=torch.float64)[1:]
    check_inductor(reduce_between_writes, a)


# -- as_strided of a view of a computed buffer (fuzz seed 20261125 #242) ---------------------


def as_strided_of_a_view(a):
    r = a.amax() + a.mean()
    v = a[2:4:3]
    w = v.as_strided([2, 3, 2], [6, 1, 3], 8)  # absolute offset into a's storage
    a.add_(r)
    fuzz.m1(v, w)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_as_strided_of_a_view_reads_the_whole_buffer(fuzz_strategy):
    # Inductor computed a[2:4:3] into a buffer of its own and applied offset 8 to that: the op
    # read uninitialized memory (Note [as_strided of a view under Inductor]).
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        check_inductor(as_strided_of_a_view, torch.randn(5, 2, 2, dtype=torch.float64))


# -- a buffer Inductor turned into an expand (fuzz seed 20261126 #226) ------------------------


def cumsum_of_zeros_read_by_the_call(t):
    r = torch.zeros((2, 6, 4), dtype=torch.float64).cumsum(1)
    fuzz.m2(t, r, r)  # r is written and read by one call
    return r.sum() * 0.5, r


def cumsum_of_zeros_written(t):
    r = torch.zeros((2, 6, 4), dtype=torch.float64).cumsum(1)
    fuzz.m2(t, r, t)
    return r


@pytest.mark.parametrize(
    "fn", [cumsum_of_zeros_read_by_the_call, cumsum_of_zeros_written], ids=["read", "written"]
)
@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_buffer_that_overlaps_itself(fuzz_strategy, fn):
    # Inductor's joint-graph patterns rewrite zeros(...).cumsum(1) as an expanded iota (stride
    # 0): the clone with those strides could not be written ("more than one element of the
    # written-to tensor refers to a single memory location"), and writing it in place broke the
    # scheduler (Note [A buffer that overlaps itself]).
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        # No FX graph cache: a cached graph skips the post-grad passes, hence the reports.
        with (
            torch._inductor.config.patch(fx_graph_cache=False),
            autofunc.inductor.collect_reports() as reports,
        ):
            check_inductor(fn, torch.arange(48.0, dtype=torch.float64).view(2, 6, 4))
        reasons = [d.reason for r in reports for d in r.decisions]
        assert autofunc.Reason.OVERLAPS_ITSELF in reasons


# -- a returned view of a buffer a later scatter writes (fuzz seed 20261128 #6) ---------------


def returned_view_then_scatter(a):
    v0 = a.select(0, 0)
    fuzz.mret(v0, v0)
    fuzz.m3way(v0, v0, v0)
    t4 = v0.clone()  # Inductor drops this clone: the output is v0's version itself
    fuzz.mopt(v0, t4)
    return (t4,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_returned_view_is_copied_before_a_later_scatter(fuzz_strategy):
    # The output's copy (Note [Returned scatters under Inductor]) used to sit at the end of
    # the graph; Inductor re-inplaced the later select_scatter into the input first, so the copy
    # read the value mopt wrote (v1 and the built-in: -1 where eager gives 0).
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        torch.manual_seed(967804291)
        check_inductor(returned_view_then_scatter, torch.randn(3, dtype=torch.float64))


# -- a returned view of a value the copy-back of a later value overwrites (seed 20261227 #49) --


def returned_view_then_later_value(a, b):
    v0 = a[2:4]
    fuzz.m1(v0, b)
    v3, v4 = v0.split([1, 1], 0)
    t6 = v4.clone()  # Inductor drops this clone: the output views m1's value of `a`
    fuzz.m3([v4, v3], t6)
    return (t6,)


def _seed_20261227_49():
    torch.manual_seed(1888256134)
    return torch.randn(4, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_returned_view_of_a_value_copied_over_later(fuzz_strategy):
    # m1 wrote `a` in place, m3 wrote clones whose value the graph copies into `a` at its end,
    # and the output (a view of m1's value) read that copy: 0.2547 where eager gives 0.5095
    # (v1, v2 and the built-in alike). Note [A returned value the copy-back overwrites].
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        check_inductor(returned_view_then_later_value, *_seed_20261227_49())


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_returned_view_of_a_value_copied_over_later_keeps_the_clone(fuzz_strategy):
    """The pass alone, on the graph Inductor hands it (the clone dropped): the first call keeps
    its clone and says why."""
    from autofunc.testing import compile_capture

    def drop_clones(gm):  # what remove_noop_ops does to this graph: clone(x) -> x
        clones = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.clone.default)
        for n in list(clones):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)

    with autofunc.override(fuzz_strategy, fuzz.OPS):
        compiled, captured = compile_capture(
            returned_view_then_later_value, before_pass=drop_clones
        )
        check = run_against_eager(returned_view_then_later_value, compiled, _seed_20261227_49())
    assert check.correct, check.mismatch  # outputs and the final inputs
    first_call = captured.report.calls[0]
    assert [d.reason for d in first_call.decisions] == [autofunc.Reason.RETURNED_VERSION]


# -- views of a gappy computed buffer (fuzz seed 20261129 #45) --------------------------------


def gappy_buffer_views(a):
    v0 = a.permute(0, 1)
    v3, v4 = v0.split([2, 2], 0)
    r5 = v0.amax() + v0.mean()
    v6 = v3.unsqueeze(-2)
    v6.add_(r5)
    fuzz.m3way(v4, v6, v6)
    return (r5,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_views_of_a_buffer_inductor_lays_out_itself(fuzz_strategy):
    # The scatter result the op writes has the input's gappy strides in the graph, but Inductor
    # allocated it densely: the pinned as_strided views reached past it (heap corruption, the
    # process aborted). The buffer is now cloned (Note [Layouts Inductor chooses]).
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        torch.manual_seed(41316091)
        check_inductor(gappy_buffer_views, torch.randn(8, 2, dtype=torch.float64)[::2])


# -- torch 2.11's Inductor drops a view's offset in an offset-less as_strided (pytorch#175325) --


def test_whether_inductor_drops_view_offsets_is_read_off_its_lowering():
    # The check reads the names the lowering's code uses, not its source; both must agree on
    # the installed torch (the fix reads ``x.get_layout().offset``).
    import inspect

    from torch._inductor import lowering

    from autofunc.backends.inductor.repairs import _inductor_drops_view_offsets

    source = inspect.getsource(lowering.as_strided)
    assert _inductor_drops_view_offsets() == ("get_layout().offset" not in source)


@pytest.mark.parametrize("strategy_name", ["v1", "v2"])
def test_offsets_made_explicit_where_inductor_drops_them(strategy_name, monkeypatch):
    # Found on torch 2.11 (fuzz seed 1234 #203): the span clone's views are as_strided of a
    # slice of the clone, which that Inductor placed at the clone's start. On a torch without
    # the bug the rewrite is forced here: the program must stay right with it.
    from autofunc.backends.inductor import repairs as pass_module

    monkeypatch.setattr(pass_module, "_inductor_drops_view_offsets", lambda: True)
    with autofunc.override(strategy_name, fuzz.OPS):
        torch.manual_seed(0)
        check_inductor(
            fuzz_seed1234_203,
            torch.randn(4, dtype=torch.float64),
            torch.randn(6, 5, 5, dtype=torch.float64)[::2],
        )


def fuzz_seed0_0(a):  # fuzz seed 0 #0, wrong under v1 on torch 2.11 (views of an input)
    fuzz.m2(a, a, a)
    r0 = a.sum(0) * 3.0
    t1 = a.clone()
    r0.mul_(2.0)
    v2, v3 = t1.split([1, 5], 0)
    fuzz.m2(v3, v2, v3)
    v4 = v3.select(0, -2)
    v5 = r0[0:3:2]
    fuzz.m3([t1, v4], v5)
    r7 = r0.amax() + r0.mean()
    v8 = t1.reshape(30)
    fuzz.m2(r7, v5, v3)
    fuzz.m2(r0, v5, v3)
    return v4, r0, v8


@pytest.mark.parametrize("program", ["fuzz_seed0_0", "kv_fp8_whole_layer"])
@pytest.mark.parametrize("strategy_name", ["v1", "v2"])
def test_explicit_offsets_keep_programs_right(program, strategy_name, monkeypatch):
    # The rewrite forced on this torch: views of graph inputs (an fp8 view of the second layer
    # of a uint8 cache, written over the first on torch 2.11's CUDA) and of computed buffers.
    from autofunc.backends.inductor import repairs as pass_module

    monkeypatch.setattr(pass_module, "_inductor_drops_view_offsets", lambda: True)
    if program == "fuzz_seed0_0":
        with autofunc.override(strategy_name, fuzz.OPS):
            torch.manual_seed(0)
            check_inductor(fuzz_seed0_0, torch.randn(5, 6, dtype=torch.float64).permute(1, 0))
    else:
        regs = corpus.register_all(strategy_name)
        try:
            check_inductor(corpus.PROGRAMS[program].fn, *corpus.PROGRAMS[program].inputs())
        finally:
            for r in regs:
                r.remove()


def test_explicit_as_strided_offsets_rewrites_views_of_computed_buffers():
    from torch.fx.experimental.proxy_tensor import make_fx

    from autofunc.backends.inductor.repairs import _explicit_as_strided_offsets

    def f(x):
        buf = x + 1  # a computed buffer
        flat = torch.ops.aten.as_strided.default(buf, [12], [1])
        shifted = torch.ops.aten.slice.Tensor(flat, 0, 3, 12)
        view = torch.ops.aten.as_strided.default(shifted, [2, 3], [1, 2])
        of_input = torch.ops.aten.as_strided.default(x[1:], [2], [1])
        as_int = torch.ops.aten.as_strided.default(x.view(torch.int32)[4:], [2], [1])
        return view, of_input, as_int

    gm = make_fx(f, tracing_mode="fake")(torch.randn(12))
    _explicit_as_strided_offsets(gm.graph)
    gm.recompile()
    strided = [n for n in gm.graph.nodes if n.target is torch.ops.aten.as_strided.default]
    assert [(n.args[0].name, n.args[1:]) for n in strided] == [
        ("add", ([12], [1])),  # not a view: nothing to make explicit
        ("add", ([2, 3], [1, 2], 3)),
        ("x_1", ([2], [1], 1)),  # a graph input: from its data pointer
        ("view_dtype", ([2], [1], 4)),  # through a view(dtype) of the input, of the same item size
    ]
    x = torch.randn(12)
    for got, expected in zip(gm(x), f(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)


# -- equal views of an input merged for Inductor (backends/inductor/share_views.py) ---


def kv_write_then_read(kv):
    out = []
    for layer in range(2):
        corpus.two(kv[layer][0], kv[layer][1])
        out.append((kv[layer][0] * kv[layer][1]).sum())
    return torch.stack(out)


@pytest.mark.parametrize("strategy_name", ["v1", "v2"])
def test_equal_views_of_an_input_are_lowered_once(strategy_name, monkeypatch):
    # The pass regenerates kv[l][0] and kv[l][1] for the write, and the later read takes the
    # same views again: the merge leaves one node per view, and the program stays right.
    from autofunc.backends.inductor import repairs as pass_module

    merged = []
    real = pass_module.share_input_views

    def counting(graph):
        merged.append(real(graph))
        return merged[-1]

    monkeypatch.setattr(pass_module, "share_input_views", counting)
    regs = corpus.register_all(strategy_name)
    try:  # no cache: the pass must run
        with (
            inductor_config.patch(fx_graph_cache=False),
            functorch_config.patch(enable_autograd_cache=False),
        ):
            check_inductor(kv_write_then_read, torch.randn(2, 2, 3, 4))
    finally:
        for r in regs:
            r.remove()
    # v2, per layer: kv[l] twice, kv[l][0] and kv[l][1] once more each, taken by the read. v1
    # writes values back with select_scatter; every scatter folds (both halves of a layer go
    # in place, Note [Buffers of one call decided in turn]), so the views of the scatters
    # become views of the input too: more of them to merge.
    assert merged == {"v1": [14], "v2": [8]}[strategy_name]


# -- fuzz seed 20261236 #80: one tensor as an op's read and mutable argument -------------------


def same_tensor_read_and_written(a):
    t2 = a.t().select(1, -3).clone()
    v4 = t2.as_strided([4], [1], 0)  # Inductor drops the clone: as_strided of a's storage
    fuzz.mopt(v4, v4)
    return fuzz.mret(t2, t2)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_one_tensor_as_read_and_mutable_argument_under_inductor(fuzz_strategy):
    # Inductor's remove_noop_ops drops t2's clone (pytorch#197489), so its own lowering of the
    # read argument v4 reads a[0, :4] instead of a[2, :4]: PyTorch's built-in is wrong here.
    # The read argument is the mutable tensor itself (Note [Read arguments eager aliases]), so
    # autofunc regenerates it from the base it copies or writes, and is right.
    with autofunc.override(fuzz_strategy, fuzz.OPS):
        torch.manual_seed(1708516585)
        check_inductor(same_tensor_read_and_written, torch.randn(5, 5, dtype=torch.float64))


# -- lazy reads computed before the call instead of a clone (Note [Lazy reads computed before
# the call]) ----------------------------------------------------------------------------------


@torch.library.custom_op("autofunc_hazards::add_row", mutates_args={"x"})
def add_row(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y)


@pytest.fixture(params=["v1", "v2"])
def row_strategy(request):
    reg = autofunc.register(add_row, strategy=request.param)
    yield request.param
    reg.remove()


def saved_before_call(x, y):
    saved = x.clone()  # returned: Inductor computes it where it stands, before the call
    add_row(x, y)
    return saved


def chain_read_before(x, y):
    b = x * 2
    c = b[:, 1:3] + 1  # a lazy chain: b is fused into c, c into d, d computed after the call
    d = c.sum(1)
    add_row(x, y)
    return d + 1, x[0]


def whole_buffer_read_before(x, y):
    b = x * 1
    c = b + 1  # as big as the buffer, and what the matmul after the call takes
    add_row(b[0], y)
    return (c @ torch.ones(5, 2)).sum() + b[0].sum()


def sum_read_after(x, y):
    b = x * 1
    old = b.sum()  # Inductor's reorder_for_locality moves it after the call
    add_row(b, y)
    return b + old


def columns_read_after(x, y):
    b = x * 1
    before = b[0] + b[1]  # moved after the call too; moved back with its views
    add_row(b[1], y)
    return before, b[1] * b[2]


def _row_reports(fn, *inputs):
    from autofunc.inductor import collect_reports

    torch._dynamo.reset()
    with inductor_config.patch(fx_graph_cache=False), collect_reports() as reports:
        check_inductor(fn, *inputs)
    assert reports  # compiled here, not served from a cache
    return [d for r in reports for c in r.calls for d in c.decisions]


@pytest.mark.parametrize("fn", [chain_read_before, sum_read_after, columns_read_after])
def test_lazy_read_computed_before_the_call(row_strategy, fn):
    decisions = _row_reports(fn, torch.randn(6, 5), torch.randn(5))
    assert decisions and all(d.inplace for d in decisions), [d.explain() for d in decisions]
    assert any("computed before the call" in d.detail for d in decisions)


def test_a_returned_read_is_computed_where_it_stands(row_strategy):
    # Note [Returned values Inductor computes where they stand]: no lazy read to compute early
    (d,) = _row_reports(saved_before_call, torch.randn(6, 5), torch.randn(5))
    assert d.inplace and not d.detail, d.explain()


@pytest.mark.parametrize("strategy_name", ["v1", "v2"])
def test_columns_read_around_two_calls(strategy_name):
    # the corpus's reads_around_calls: a column of y read before and after a call on y[1], then
    # a call on the input's x[2]: each read is computed where eager computes it, no clone
    regs = corpus.register_all(strategy_name)
    try:
        program = corpus.PROGRAMS["reads_around_calls"]
        decisions = _row_reports(program.fn, *program.inputs())
    finally:
        for r in regs:
            r.remove()
    assert len(decisions) == 2 and all(d.inplace for d in decisions), decisions


def test_lazy_read_bigger_than_the_clone_keeps_the_clone(row_strategy):
    decisions = _row_reports(whole_buffer_read_before, torch.randn(6, 5), torch.randn(5))
    (d,) = decisions
    # Inductor's reorder_for_locality may already have moved the read after the call
    lazy_or_later = (autofunc.Reason.LAZY_READ, autofunc.Reason.READ_LATER)
    assert not d.inplace and d.reason in lazy_or_later, d.explain()


def test_read_moved_back_before_the_call(row_strategy):
    decisions = _row_reports(sum_read_after, torch.randn(6, 5), torch.randn(5))
    (d,) = decisions
    assert d.inplace and "sum_1 moved before the call" in d.detail, d.explain()


def test_lazy_read_realized_in_the_post_grad_graph(row_strategy):
    from autofunc.bench.user_triton import post_grad_graph
    from autofunc.testing import format_graph

    gm = post_grad_graph(saved_read_after, [torch.randn(6, 5), torch.randn(5)])
    code = format_graph(gm)
    # the copy into a fresh buffer comes before the call, and the sum after it reads it
    assert code.index("aten.empty_like") < code.index("aten.copy_") < code.index("add_row")
    assert "aten.add.Tensor(copy__default, select_2)" in code, code


def saved_read_after(x, y):
    saved = x[1] * 1.5  # lazy: Inductor would compute it where the sum after the call needs it
    add_row(x, y)
    return saved + x[0]


def row_of_a_value_read_before(x, y):
    h = x * 2  # lazy; the extern kernel gets a copy of it, h itself stays lazy
    s = doubled_sum(h)
    add_row(x, y)
    return h[0], s  # a row of the old h: computed before the call, not all of h or x


def columns_of_a_value_read_before(x, y):
    h = x * 2
    s = doubled_sum(h)
    add_row(x, y)
    return h[:, 1:3] + 1, s


@pytest.mark.parametrize("fn", [row_of_a_value_read_before, columns_of_a_value_read_before])
def test_views_computed_instead_of_their_base(row_strategy, fn):
    # Note [Views computed instead of their base]: PyTorch's built-in gives a wrong result
    # here (it writes x in place and Inductor computes h after the call); the clone of x this
    # cost before is now a view of h computed before the call
    (d,) = _row_reports(fn, torch.randn(6, 5), torch.randn(5))
    assert d.inplace and "moved before the call" in d.detail, d.explain()


def empty_write_read_around(x, y):
    h = x * 2  # lazy, read after the call: a write of the call would need it computed first
    add_row(x[2:2, 0], y[:0])  # writes no element
    return h + 1


def test_an_empty_write_is_no_hazard(row_strategy):
    # Note [An empty write]: the call writes x in place with nothing computed before it; the
    # empty region used to count as overlapping h's read (v1 cloned x, v2 moved h's readers)
    (d,) = _row_reports(empty_write_read_around, torch.randn(6, 5), torch.randn(6))
    assert d.inplace and d.detail == "", d.explain()


def read_through_a_copy_a_call_wrote(x, y):
    buf = x * 1
    before = buf[0].clone()
    add_row(buf[:, 0], y[:6])  # buf[0] is read later: the call writes a clone of buf
    add_row(x[:, 1], y[:6])  # buf reads x, but only through that clone and buf[0]
    return buf, before + buf[0]


def test_a_copy_a_call_wrote_is_no_pending_read():
    # Note [Copies the calls write] in alias.py: the first call's clone of buf is computed
    # there, so the second call keeps no clone of x (120 B); what reads buf[0] after it (the
    # returned sum) moves before it, and nothing is computed there (Note [Users of the
    # frontier moved back before the call]; 20 B of buf[0] before that)
    reg = autofunc.register(add_row, strategy="v2")
    try:
        first, second = _row_reports(
            read_through_a_copy_a_call_wrote, torch.randn(6, 5), torch.randn(6)
        )
    finally:
        reg.remove()
    assert not first.inplace, first.explain()
    assert second.inplace and second.detail.endswith("nothing computed before the call, 0 B"), (
        second.explain()
    )


def test_a_view_of_the_frontier_bigger_than_its_base_is_not_moved():
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from autofunc.backends.inductor.lazy_reads import plan_realization

    def f(x, y):
        b = x * 2  # read by the call's buffer, lazy
        x.add_(y)  # stands for the call
        return b[1], torch.ops.aten.expand.default(b, [3, 4, 5])  # a row; three of b

    gm = torch.fx.symbolic_trace(f)
    FakeTensorProp(gm).propagate(torch.randn(4, 5), torch.randn(5))
    n = {node.name: node for node in gm.graph.nodes}
    call = n["add_"]

    def lazy(node):
        return node.op in ("call_function", "call_method") and node is not call

    plan = plan_realization(call, [n["mul"]], [], lazy)
    assert [x.name for x in plan.nodes] == ["mul"] and plan.moved == (), plan

    def g(x, y):
        b = x * 2
        x.add_(y)
        return b[1], b[2:4]

    gm = torch.fx.symbolic_trace(g)
    FakeTensorProp(gm).propagate(torch.randn(4, 5), torch.randn(5))
    n = {node.name: node for node in gm.graph.nodes}
    plan = plan_realization(n["add_"], [n["mul"]], [], lazy)
    # the row and the two rows (60 bytes) instead of b (80): moved before the call
    assert [x.name for x in plan.nodes] == ["getitem", "getitem_1"], plan
    assert plan.moved == plan.nodes and plan.nbytes == 60, plan


def test_realization_plan_is_the_frontier_and_its_cost():
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from autofunc.backends.inductor.lazy_reads import plan_realization

    def f(x, y):
        b = x * 2  # read by the call's buffer
        c = b[:, 1:3] + 1  # lazy, before the call
        d = c.sum(1)  # lazy, used after the call: the frontier
        e = b + 1  # lazy, its sum is computed after the call: the frontier too
        x.add_(y)  # stands for the call
        return d * 2, e.sum()

    gm = torch.fx.symbolic_trace(f)
    FakeTensorProp(gm).propagate(torch.randn(4, 5), torch.randn(5))
    n = {node.name: node for node in gm.graph.nodes}
    call = n["add_"]

    def lazy(node):
        return node.op in ("call_function", "call_method") and node is not call

    plan = plan_realization(call, [n["mul"]], [], lazy)
    # what the nodes after the call take: c.sum(1), and b + 1 (its sum comes after the call)
    assert [x.name for x in plan.nodes] == ["sum_1", "add_1"]
    assert plan.nbytes == 4 * 4 + 4 * 5 * 4
    returned = plan_realization(call, [n["mul"]], [n["sum_1"], n["add_1"]], lazy)
    assert returned.nbytes == 0


# -- values Inductor computes where they are taken (Note [Values computed where they are
# taken]): a read of them is no lazy read for a later call ----------------------------------


@torch.library.custom_op("autofunc_hazards::doubled_sum", mutates_args=())
def doubled_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum() * 2


@doubled_sum.register_fake
def _(x):
    return x.new_empty(())


def pinned_for_a_call_then_source_written(state, y):
    buf = state * 2  # lazy; the pin for the first call's view computes it there
    add_row(buf[1:3], y)
    add_row(state, y)  # writes what buf was computed from
    return buf


def pinned_by_the_program_then_source_written(state, y):
    buf = state * 2  # lazy; the program's as_strided of it computes it there
    s = doubled_sum(buf.as_strided((2, 2), (5, 1), 6))  # (keeps it before the call)
    add_row(state, y)
    return buf * 3, s


def taken_by_an_op_then_source_written(state, y):
    buf = state * 2  # the op gets a copy of it with exact strides: buf itself stays lazy
    s = doubled_sum(buf)
    add_row(state, y)
    return buf * 3, s


def view_pinned_then_source_written(state, y):
    buf = state * 2  # as_strided of a view of it proves nothing either
    w = buf[1:3].as_strided((2, 2), (5, 1), 6)
    add_row(state, y)
    return buf * 3, w + 1


@pytest.mark.parametrize(
    "fn, calls",
    [(pinned_for_a_call_then_source_written, 2), (pinned_by_the_program_then_source_written, 1)],
)
def test_a_value_computed_where_it_is_taken_is_no_lazy_read(row_strategy, fn, calls):
    decisions = _row_reports(fn, torch.randn(6, 5), torch.randn(5))
    assert len(decisions) == calls and all(d.inplace for d in decisions), decisions
    # nothing computed before the call that writes state: the as_strided computed buf
    assert not any("computed before the call" in d.detail for d in decisions), decisions


@pytest.mark.parametrize(
    "fn", [taken_by_an_op_then_source_written, view_pinned_then_source_written]
)
def test_a_value_an_op_or_a_view_takes_stays_lazy(row_strategy, fn):
    # a wrong result if the second call wrote state in place with nothing computed first
    (d,) = _row_reports(fn, torch.randn(6, 5), torch.randn(5))
    assert not d.inplace or "computed before the call" in d.detail, d.explain()


def test_only_a_value_as_strided_takes_is_computed_there():
    from autofunc.backends.inductor.policy import computed_where_taken

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    buf = graph.call_function(torch.ops.aten.mul.Tensor, (x, 2))
    pin = graph.call_function(torch.ops.aten.as_strided.default, (buf, [2], [1]))
    row = graph.call_function(torch.ops.aten.select.int, (buf, 0, 1))
    pin_row = graph.call_function(torch.ops.aten.as_strided.default, (row, [2], [1]))
    s = graph.call_function(doubled_sum._opoverload, (buf,))
    pin_x = graph.call_function(torch.ops.aten.as_strided.default, (x, [2], [1]))
    assert computed_where_taken(pin, buf)
    assert not computed_where_taken(pin_row, row)  # a view: not a value of its own
    assert not computed_where_taken(pin_row, buf)  # as_strided of a view of buf
    assert not computed_where_taken(s, buf)  # an extern kernel gets a copy
    assert not computed_where_taken(pin_x, x)  # a graph input: computed already


# -- a layout Inductor fixes at the call, after a view used it (fuzz seed 20261249 #3) --------


def permuted_view_read_before_the_call(b):
    v0 = b.t()
    b.mul_(0.5)  # b's new value: a computed buffer with b's permuted strides
    r2 = v0.cumsum(0)  # an extern reads a view of it before the op fixes its layout
    fuzz.m1(b, r2)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_layout_fixed_after_a_view_used_it(fuzz_strategy):
    # Note [A layout fixed after it was used]: in place, the cumsum read b.t() of the layout
    # Inductor had first chosen (PyTorch's built-in is wrong the same way). Note [A pinned root
    # keeps its layout]: the pin of b's new value fixes it where it is computed, before the
    # cumsum: written in place, right
    from autofunc.inductor import collect_reports

    torch._dynamo.reset()
    with (
        autofunc.override(fuzz_strategy, fuzz.OPS),
        inductor_config.patch(fx_graph_cache=False),
        collect_reports() as reports,
    ):
        torch.manual_seed(0)
        check_inductor(
            permuted_view_read_before_the_call,
            torch.randn(2, 3, dtype=torch.float64).permute(1, 0),
        )
    (d,) = [d for r in reports for c in r.calls for d in c.decisions]
    assert d.reason is autofunc.Reason.INPLACE, d.explain()


# -- a pinned view of a buffer Inductor has not computed yet (fuzz seed 20261253 #28) ---------


def one_element_of_a_constant_twice(a):
    t = torch.ones(5, dtype=torch.float64).select(0, -2).clone()  # the clone is a no-op to
    fuzz.m2(t, t, t.cumsum(0))  # Inductor: the op writes element 3 of ones(5), twice aliased
    return (t,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_pinned_view_of_an_unrealized_buffer_keeps_its_offset(fuzz_strategy):
    # Note [Pinning a view of a computed buffer]: the pin used to land at element 0
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        check_inductor(one_element_of_a_constant_twice, torch.randn(5, dtype=torch.float64))


def realized_view_given_to_a_later_call(a):
    r0 = a.sum() * -2.0
    v1 = r0.unsqueeze(0)  # read before the first call, given to the third after it
    r2 = v1.amax() + v1.mean()
    o3 = fuzz.mret(r2, r0)
    fuzz.m3([a], o3)
    return (fuzz.mret(v1, r2),)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_realized_value_given_to_a_later_call(fuzz_strategy):
    # fuzz seed 20261253 #34: the value computed before the first call is a buffer of the
    # analysis (AliasAnalysis.add_value) that a later call may take; it used to have no version
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        torch.manual_seed(0)
        check_inductor(
            realized_view_given_to_a_later_call, torch.randn(5, 2, 2, dtype=torch.float64)
        )


# -- fuzz seed 20261255 #237 (PyTorch's built-in is wrong too): Note [Values merged into an input's memory]


def clone_of_an_input_view_written_later(a, b):
    fuzz.m3way(b, a, b)
    v0 = b.view(2, 2)
    r1 = v0.sum() * 0.5
    t2 = v0.clone()  # Inductor's remove_noop_ops makes t2 a view of the input b
    fuzz.m1(v0, v0)
    fuzz.m3way(a, r1, t2)
    return (t2,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_clone_of_an_input_view_written_by_a_later_call(fuzz_strategy):
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        torch.manual_seed(0)
        check_inductor(
            clone_of_an_input_view_written_later,
            torch.randn(3, dtype=torch.float64),
            torch.randn(4, dtype=torch.float64),
        )


# -- fuzz seed 20261261 #200: a reader of one buffer that is another buffer of the same call --


def reader_written_by_the_same_call(b):
    r0 = b.sum(0) * -2.0  # reads b; a buffer the second call writes in place too
    r2 = r0.sum() * 1.5
    fuzz.m2(r0, r0, r0)
    fuzz.m2(r0, b, b)
    return ((r2 + r0).sum(),)  # r0 after the second call: its new value, not a copy of the old


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_lazy_reader_the_call_writes_is_not_computed_as_old(fuzz_strategy):
    # Note [Lazy reads computed before the call] (plan_realization's written_here)
    torch.manual_seed(0)
    check_fuzz_ops(
        reader_written_by_the_same_call, fuzz_strategy, torch.randn(3, dtype=torch.float64)
    )


# -- fuzz seed 20261263 #26 (v1; PyTorch's built-in wrong too): a buffer that is a view -------


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_buffer_that_views_a_computed_buffer(fuzz_strategy):
    # Note [A written view of an unrealized buffer]: under v1 the buffer of ``mlate(v2, a)`` is
    # ``v2 = r1.narrow(0, 0, 2)`` itself, with ``r1`` not computed yet; Inductor computed ``v2``
    # into a buffer of its own, which the op wrote, and ``r1`` never saw the write. The root
    # ``r1`` is pinned now (the view itself never is: that broke fuzz seeds 20261267 #84 and
    # 20261268 #20, whose programs are tests too).
    program = fuzz.program_for(20261263, 26, None, fuzz.Features.as_drawn_before())
    assert "ops.mlate(v2, a)" in program.source()
    failure = fuzz.check(program, fuzz_strategy, "inductor")
    assert failure is None, str(failure)


# -- fuzz seed 20261266 #54 (v1; PyTorch's built-in wrong too): an offset into a scatter ------


def offset_into_a_scatter_of_an_input(b):
    v0 = b[1, 0:3:1, :]
    r1 = b * 1.5
    v3 = v0.unsqueeze(0)
    fuzz.mlate(v0, r1)  # v1: a clone of v0, scattered back into b (select_scatter)
    fuzz.m2(v0, v3, r1)  # v2 (aliased arguments): views of that scatter, one at offset 36
    return ()


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_an_explicit_offset_into_a_scatter_inductor_reinplaces(fuzz_strategy):
    # Note [as_strided offsets on torch 2.11]: Inductor re-inplaces the scatter into b, whose
    # storage offset later torch subtracts from an explicit offset; the view keeps its relative
    # form there
    torch.manual_seed(0)
    b = torch.randn(7, 6, 6, dtype=torch.float64)[1:]
    check_fuzz_ops(offset_into_a_scatter_of_an_input, fuzz_strategy, b)


def view_of_a_written_diagonal(a, b):
    v0 = a.diagonal(2, 1, 2)
    o2 = fuzz.mret(v0, b)
    fuzz.m1(v0[1], o2)  # a view of the input's memory, through the first call's output
    return ()


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_view_of_a_written_diagonal_of_an_input(fuzz_strategy):
    # fuzz seed 20261268 #20: wrong under v1 with the pin above (its offset was lost)
    torch.manual_seed(272033013)
    a, b = torch.randn(4, 6, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    check_fuzz_ops(view_of_a_written_diagonal, fuzz_strategy, a, b)


# -- fuzz seed 20261269 #257 (v1 and v2; PyTorch's built-in wrong too): views of a dense copy --


def views_of_an_expanded_value(a, b):
    r2 = torch.zeros((6, 4), dtype=torch.float64).cumsum(0)  # Inductor: an expanded iota
    fuzz.m3([r2, r2.narrow(1, 0, 1)], a)  # one buffer, written whole and through a narrow
    fuzz.m3([b, b, b], r2)  # reads both writes
    return ()


def written_view_of_a_sum(a):
    r1 = a.sum(2) * 0.5
    v2 = r1.narrow(0, 0, 2)
    fuzz.mlate(v2, a)  # v1: the buffer is the narrow itself
    t = torch.ones(2, dtype=torch.float64)
    fuzz.m3way(t[0], t[1], r1)  # writes r1 from its value after the first call
    return (v2,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_views_of_a_dense_copy_of_an_expanded_value(fuzz_strategy):
    # Note [A buffer that overlaps itself]: the dense copy is pinned, so the narrow is a view of
    # it and not a copy Inductor computes apart
    torch.manual_seed(1520771379)
    a = torch.randn(5, 5, 3, dtype=torch.float64)
    b = torch.randn(2, 6, dtype=torch.float64)
    check_fuzz_ops(views_of_an_expanded_value, fuzz_strategy, a, b)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_written_view_of_a_lazy_value(fuzz_strategy):
    # Note [A written view of an unrealized buffer], the smallest form of fuzz seed 20261263 #26
    torch.manual_seed(0)
    a = torch.randn(6, 2, 3, dtype=torch.float64).permute(2, 0, 1)
    check_fuzz_ops(written_view_of_a_sum, fuzz_strategy, a)


# -- fuzz seed 20261279 #278 (v2): a realized value that a later call writes -------------------


def realized_value_written_later(a):
    _, v1 = a.split([1, 1], 1)
    v2 = v1[:, 0:1:3]
    r5 = v2 * -2.0  # read by the first call, used after it: computed before it (a realization)
    fuzz.m1(v2, r5)
    g6 = v2 * 0.5 + r5.mean()
    fuzz.m3way(g6, g6, r5)  # writes r5 (its realized copy)
    return (g6,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_realized_value_a_later_call_writes(fuzz_strategy):
    # Note [A realized value a later call writes]: Inductor's scheduler raised KeyError under v2
    # where the realized copy was written; r5 is now computed through a pin, and the input is
    # written in place
    from autofunc.inductor import collect_reports

    torch.manual_seed(0)
    a = torch.randn(3, 2, dtype=torch.float64)
    with collect_reports() as reports:
        check_fuzz_ops(realized_value_written_later, fuzz_strategy, a)
    first = reports[0].calls[0].decisions
    if fuzz_strategy == "v2":
        assert [d.reason for d in first] == [autofunc.Reason.INPLACE], first
        assert "mul computed before the call" in first[0].detail, first


# -- fuzz seed 20261285 #231 (v1, v2; PyTorch's built-in wrong too): a returned scatter ---------


def scatter_of_a_dropped_clone_returned(b):
    t0 = b.clone()  # remove_noop_ops drops it: the scatter below is built on b
    v1 = t0.diagonal(-1, 0, 1)
    fuzz.m3way(b, b, b)
    v1.mul_(2.0)  # Inductor re-inplaces the scatter into b, which the copy-back then overwrites
    return (t0, v1.unfold(0, 3, 3))  # the view of it is taken after the copy-back


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_returned_scatter_is_copied_before_the_copy_back(fuzz_strategy):
    # Note [Returned scatters under Inductor], _copy_point
    torch.manual_seed(0)
    check_fuzz_ops(scatter_of_a_dropped_clone_returned, fuzz_strategy, torch.randn(6, 5).double())


# -- fuzz seed 20261920 #32 (v1, v2; the built-in right): a returned scatter, through a reshape --


def clone_of_a_reshaped_scatter(b):
    v7 = b.narrow(1, 1, 3).view(5, 9)  # a reshape that views b
    v8 = v7.select(0, 2)
    fuzz.m2(v8, v7, b)
    v7.mul_(0.5)  # a scatter into b, copied back; Inductor re-inplaces it into b
    return (v8.clone(),)  # remove_noop_ops drops the clone


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_returned_scatter_through_a_reshape_is_copied(fuzz_strategy):
    # Note [Returned scatters under Inductor]: _written_input stopped at the reshape, and the
    # output was b's memory (right values, wrong aliasing)
    torch.manual_seed(0)
    check_fuzz_ops(clone_of_a_reshaped_scatter, fuzz_strategy, torch.randn(10, 4, 3)[::2])
    corpus_program = corpus.PROGRAMS["returned_clone_of_a_reshaped_scatter"]
    regs = corpus.register_all(fuzz_strategy)
    try:
        with inductor_config.patch(fx_graph_cache=False):
            torch._dynamo.reset()
            check_inductor(corpus_program.fn, *corpus_program.inputs())
    finally:
        for r in regs:
            r.remove()


# -- fuzz seed 20261350 #87 (v1): a call's value at another offset, written again -------------


def rewritten_at_an_offset(a, b):
    v0 = b[0:1:2, None]  # b starts at storage offset 1: v2's new base of it starts at 0
    fuzz.m1(v0, v0)
    o2 = fuzz.mret(a, a)
    r3 = v0.sum() * 0.5  # the old value of v0, read after the next call in the graph
    fuzz.m1(v0, o2)  # v1: its buffer is a view of the first call's value, now b's memory
    r5 = r3.sum() * 3.0
    fuzz.mret(v0, r5)
    return ()


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_write_of_a_value_merged_at_another_offset(fuzz_strategy):
    # Note [Written and read in two coordinates] in alias.py: the write was placed at the
    # value's own offset 0, the read of its old value at b's offset 1, so they never met and
    # the second m1 wrote b in place before r3 read it (v1; the built-in was right)
    torch.manual_seed(0)
    a = torch.randn(2, 4, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)[1:]
    check_fuzz_ops(rewritten_at_an_offset, fuzz_strategy, a, b)


# -- fuzz seed 20261351 #3 (v1, v2): the copy of one buffer, fed by lazy reads of another --------


def copy_fed_by_lazy_reads(a):
    t0 = a * 1
    r2 = t0.amax() + t0.mean()  # reads a; cloned for the call (its old value is read later)
    r4 = r2.cumsum(0)
    fuzz.m3way(r2, a, r2)  # a in place: its lazy reads computed first, not r2's clone
    return (r4 + r2,)  # r2 after the call: what the op wrote into the clone


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_copy_the_call_writes_is_no_lazy_read(fuzz_strategy):
    # Query.written_here in rules.py: the clone was computed before the call as a pending read
    # of a, and the result read that copy of the clone's old value (the built-in was right)
    torch.manual_seed(0)
    check_fuzz_ops(copy_fed_by_lazy_reads, fuzz_strategy, torch.randn(3, dtype=torch.float64))


# -- a written view of an unrealized buffer, with dynamic sizes ------------------------------


def native_write_between_calls(x):
    add_one(x)
    x[0].mul_(2)  # functionalized: x is a select_scatter from here on, a lazy node
    add_one(x[1])  # a view of it: written in place once its root is pinned
    x[:, 2].add_(1)
    return x.clone()


def test_a_written_view_of_an_unrealized_buffer_with_dynamic_sizes(strategy):
    # Note [A written view of an unrealized buffer] in backends/inductor/policy.py: backed symbolic
    # sizes are pinned too. Unpinned, v1 had Inductor compute the row into a buffer of its own
    # and the scatter into another: three allocations where the returned clone is the only one
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x = torch.randn(3, 4)
    expected_x = x.clone()
    expected = native_write_between_calls(expected_x)
    with inductor_config.patch(fx_graph_cache=False):
        compiled = torch.compile(native_write_between_calls, fullgraph=True, dynamic=True)
        got, (code,) = run_and_get_code(compiled, x)
    assert torch.allclose(got, expected) and torch.allclose(x, expected_x)
    call = code[code.index("def call(") :]
    assert call.count("empty_strided_cpu(") == 1, call


# -- a written view of a scatter result through a reshape (fuzz seed 20261605 #87) -----------


def select_of_a_scatter_written(b):
    v5 = b.split([3, 1], 0)[1].select(1, 0).view(1, 1)
    r8 = v5 * 1.5
    fuzz.mlate(v5.permute(0, 1), r8)  # v1: written back as scatters into b
    fuzz.m2(v5 * 3.0, v5.permute(0, 1), r8)  # writes the select of the scatter result


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_reshape_that_views_a_scatter_is_no_root(fuzz_strategy):
    # Note [A reshape that views its input]: under v1 the pin went on the reshape, a view of
    # the scatter Inductor had not computed, and the op wrote element 0 of b, not element 9
    b = torch.randn(8, 3, dtype=torch.float64)[::2]
    check_fuzz_ops(select_of_a_scatter_written, fuzz_strategy, b)


# -- a pinned scatter Inductor writes into its input (fuzz seed 20261806 #261, reduced) -------

def wrapper_code(fn, *inputs) -> str:
    """Inductor's wrapper code for ``fn(*inputs)``, compiled and never run (a view past its
    buffer would write past the allocation)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes = []

    class _NotRun:
        def call(self, *args):
            raise _Stop

    class _Stop(Exception):
        pass

    def compile_to_module(self):
        wrapper, _ = self.codegen_with_cpp_wrapper() if self.cpp_wrapper else self.codegen()
        codes.append(wrapper.value)
        return _NotRun()

    with mock.patch.object(GraphLowering, "compile_to_module", compile_to_module):
        torch._dynamo.reset()
        with pytest.raises(_Stop):
            torch.compile(fn, fullgraph=True)(*inputs)
    (code,) = codes
    return code


def diagonal_of_a_gappy_input_written(a):
    v1 = a.permute(0, 1)[1:3]
    t2 = torch.ones(24, dtype=torch.float64)
    t3 = torch.ones(24, dtype=torch.float64)
    v4 = v1.diagonal(3, 0, 1)
    fuzz.m1(v4, t3)  # v1: a clone, put back by a diagonal_scatter inside a slice_scatter
    v6 = v4.unsqueeze(-1)
    fuzz.m2(t2, v1, v6)  # writes the slice_scatter's value
    return t3.sum(), v6, t3, t2[14:15:2]


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_scatter_inductor_writes_into_its_input_is_not_pinned(fuzz_strategy):
    # Note [A pinned scatter Inductor rewrites] in backends/inductor/evaluation.py: under v1
    # the slice_scatter was pinned with its recorded strides (12, 1), Inductor wrote it into
    # its input's buffer, laid out (6, 1), and m2 wrote 40 bytes past that 192-byte buffer
    a = torch.randn(8, 6, dtype=torch.float64)[::2]
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        assert views_past_their_buffers(wrapper_code(diagonal_of_a_gappy_input_written, a)) == []
    check_fuzz_ops(diagonal_of_a_gappy_input_written, fuzz_strategy, a)


def test_views_past_their_buffers_reads_the_wrapper():
    code = (
        "buf3 = empty_strided_cpu((4, 6), (6, 1), torch.float64)\n"
        "buf5 = buf3; del buf3  # reuse\n"
        "op(reinterpret_tensor(buf5, (2, 6), (6, 1), 12), reinterpret_tensor(buf5, (2, 6), "
        "(12, 1), 12))\n"
    )
    assert views_past_their_buffers(code) == [
        "reinterpret_tensor(buf5, (2, 6), (12, 1), 12) of 24 elements"
    ]


# -- a frontier node that reads the buffer itself is not cut (fuzz seed 20261904 #244) ---------


def sum_of_the_input_read_before_the_call(b):
    v0 = b[2:3:2, 3:4:2]
    r1 = v0.sum() * 1.5
    r3 = (b + r1).sum()  # reads b itself, and b through r1
    fuzz.m2(v0, v0, v0)
    return r3.view(1)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_frontier_node_that_reads_the_buffer_is_not_cut_at_its_inputs(fuzz_strategy):
    # Note [A frontier cut at its inputs] in backends/inductor/frontier.py: b + r1 was cut at
    # r1 alone, and Inductor summed b after m2 wrote it (the built-in is wrong too)
    b = torch.randn(4, 6, dtype=torch.float64)
    check_fuzz_ops(sum_of_the_input_read_before_the_call, fuzz_strategy, b)


# -- a reader moved back before an earlier call is still lazy (fuzz seed 20261904 #70) --------


def a_reader_moved_back_then_written(a, b):
    r0 = b.sum(1) * 1.5
    r1 = r0.sum(0) * -2.0
    v2 = r1.unsqueeze(-1)
    r4 = v2.sum() * 0.5
    t5 = torch.ones(2, dtype=torch.float64)
    r8 = v2 * -2.0
    fuzz.m1(v2, t5)  # t5 + r4 moved before this call, r4 copied where it stands
    t5.add_(r4)
    fuzz.m2(r4, r8, r4)  # writes that copy: t5 + r4 must be computed before
    fuzz.mlist(v2, [r8, t5, v2])
    return r4, r1, v2


def test_a_reader_moved_back_before_an_earlier_call_is_still_a_lazy_read():
    # Note [Reads moved back before the call]: the analysis keeps a moved reader at its old
    # place, after the second call, so neither of its read rules saw it (the built-in is wrong
    # too, differently)
    a = torch.randn(7, 2, 2, dtype=torch.float64)[1:]
    b = torch.randn(3, 3, dtype=torch.float64).permute(1, 0)
    check_fuzz_ops(a_reader_moved_back_then_written, "v2", a, b)


# -- the strides the op is handed (Note [The strides eager passes] in hops/common.py) ---------

_STRIDES_SEEN: list = []


@torch.library.custom_op("autofunc_hazards::add_sum_of", mutates_args={"x"})
def add_sum_of(x: torch.Tensor, y: torch.Tensor) -> None:
    _STRIDES_SEEN.append(tuple(y.stride()))
    x.add_(y.sum())


def cumsum_of_zeros_read(x):
    r = torch.zeros(5, 3, 4).cumsum(2)  # Inductor's patterns make this an expand of one row
    add_sum_of(x, r)
    return r, x


@pytest.mark.parametrize("strategy", ["v1", "v2", "pytorch_v2"])
def test_a_read_argument_the_graph_recomputes_keeps_eagers_strides(strategy):
    # fuzz seed 20261906 #53: the op was handed strides (0, 0, 1) where eager hands (12, 4, 1)
    reg = None if strategy == "pytorch_v2" else autofunc.register(add_sum_of, strategy=strategy)
    autofunc.reinplace_pytorch_nodes(strategy == "pytorch_v2")
    try:
        _STRIDES_SEEN.clear()
        with inductor_config.patch(fx_graph_cache=False):
            torch._dynamo.reset()
            check_inductor(cumsum_of_zeros_read, torch.ones(3))
    finally:
        autofunc.reinplace_pytorch_nodes(False)
        if reg is not None:
            reg.remove()
    assert _STRIDES_SEEN == [(12, 4, 1), (12, 4, 1)]  # eager's call, then the compiled one


# -- Note [What a call writes is computed by the call] in passes/reinplace.py ------------------


def written_then_read_through_a_later_write(b):
    r = b * 1.5
    t = r + 0.25
    torch.ops.autofunc_fuzz.m2(b, r, t)  # writes b and r (lazy until here) in place
    o = torch.ops.autofunc_fuzz.mlret(b, b)  # writes b: r was computed before the first call
    torch.ops.autofunc_fuzz.mcache(t, o, torch.tensor([2]))  # t, read from r, written
    return t, r


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_value_a_call_writes_is_no_pending_read_of_its_input(fuzz_strategy):
    # fuzz seed 20261907 #217, shrunk: the second call cloned b for r's reads of it
    with collect_reports() as reports:
        check_fuzz_ops(
            written_then_read_through_a_later_write, fuzz_strategy, torch.randn(3).double()
        )
    (report,) = reports
    assert report.bytes_cloned == 0, report


# -- programs the fuzzer found against Note [A buffer copied into an input is the input] -----

# (seed, index, the call the program must hold)
INPUTS_AS_BUFFERS = [
    # PyTorch's built-in wrong: the clone ``m2(b, b, b)`` keeps for its aliased arguments is
    # contiguous and pinned (an ``as_strided`` of the ``clone``) and copied into ``b`` at the
    # end; reading its source off the pin as off a span copy raised IndexError in the first
    # form of the repair
    (20261926, 16, "ops.m2(b, b, b)"),
    # the built-in right: ``b.mul_(-1); mcache(b, ...); mlist(v, [v, b, b])``, ``v`` a view of
    # ``b``: making ``b`` the buffer of ``b * -1`` had Inductor hand the calls a buffer of its
    # own for ``b`` and copy each list argument apart, so ``mlist`` saw its written argument
    # share no memory with the others
    (20261928, 55, "ops.mlist(v1, [v1, b, b])"),
]


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
@pytest.mark.parametrize("seed, index, call", INPUTS_AS_BUFFERS)
def test_inputs_as_buffers_on_fuzz_programs(seed, index, call, fuzz_strategy):
    program = fuzz.program_for(seed, index)
    assert call in program.source()
    failure = fuzz.check(program, fuzz_strategy, "inductor")
    assert failure is None, str(failure)


# -- a value pinned through a split for a later call (fuzz seed 20261942 #265, shrunk) ----------


def split_value_pinned_for_a_later_call(a):
    r0 = a.sum(1) * 1.5
    v1, v2 = r0.split([5, 1], 0)
    fuzz.mlist(a, [a, a.view(torch.int64), v2])  # reads v2; r0 is read later
    fuzz.m2(v2, v2, v1)  # writes v2: r0 computed before the first call through a pin
    return (r0,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_a_value_pinned_through_a_split(fuzz_strategy):
    # the pin's views again on the pin went through the split, a tuple the alias analysis
    # gives no version: KeyError in the pass (v1 and v2; PyTorch's built-in right)
    torch.manual_seed(1526838979)
    a = torch.randn(6, 4, dtype=torch.float64)
    check_fuzz_ops(split_value_pinned_for_a_later_call, fuzz_strategy, a)

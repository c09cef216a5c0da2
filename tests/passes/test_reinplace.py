"""The re-inplace pass on AOTAutograd graphs (no Inductor): decisions, graphs, results."""

import functools
import operator

import expecttest
import pytest
import torch

import autofunc
from autofunc import Reason
from autofunc.hops.adapter import mutation_targets
from autofunc.backends.inductor.policy import INDUCTOR
from autofunc.passes.policy import GENERIC
from autofunc.testing import compile_capture, count_targets, run_against_eager
from tools import corpus

aten = torch.ops.aten


def run(program_or_fn, inputs=None, **capture_kwargs):
    """Compile with the pass, check against eager (outputs and inputs); return captured."""
    fn = getattr(program_or_fn, "fn", program_or_fn)
    inputs = inputs if inputs is not None else program_or_fn.inputs()
    compiled, captured = compile_capture(fn, **capture_kwargs)
    check = run_against_eager(fn, compiled, inputs)
    assert check.correct, check.mismatch
    return captured


def reasons(captured):
    return [d.reason for d in captured.report.decisions]


def clones(captured):
    gm = captured.modules[0]
    return sum(1 for n in gm.graph.nodes if n.meta.get("autofunc.clone"))


# -- decisions, per program, for both strategies ------------------------------------------------

EXPECTED = {
    # program: (v1 reasons, v2 reasons)
    "note_base": ([Reason.INPLACE], [Reason.INPLACE]),
    # v1 clones the row: the functional program scatters it back, reading the old base only
    # around it (Note [Scatters read around what they replace]), so it goes in place too
    "note_select": ([Reason.INPLACE], [Reason.INPLACE]),
    "note_column": ([Reason.INPLACE], [Reason.INPLACE]),
    "input_inplace": ([Reason.INPLACE], [Reason.INPLACE]),
    # v1: the row is scattered back and the input copied back (Note [Views of graph inputs])
    "input_row": ([Reason.INPLACE], [Reason.INPLACE]),
    # the old value is read before the call only
    "read_after": ([Reason.INPLACE], [Reason.INPLACE]),
    # the returned alias buf[1] is disjoint from the written buf[0]
    "old_value_returned": ([Reason.INPLACE], [Reason.INPLACE]),
    "kwarg_only": ([Reason.INPLACE], [Reason.INPLACE]),
    # q and k are interleaved but disjoint; v is read afterwards
    # v1: the first clone's scatter reads the old base around it, hence where the second
    # writes, but copies that into what the second's scatter replaces (Note [Scatter chains
    # overwrite what they copy]), and reads q's value only where q was (Note [A call's value
    # read where it was written])
    "qkv_split": ([Reason.INPLACE, Reason.INPLACE], [Reason.INPLACE]),
    # v1: the second is decided once the first's scatter is folded (Note [Buffers of one call
    # decided in turn])
    "two_disjoint": ([Reason.INPLACE, Reason.INPLACE], [Reason.INPLACE]),
    # overlapping views: v1 hands the call to v2, which clones their common base once
    "two_overlapping": ([Reason.INPLACE], [Reason.INPLACE]),
    "disjoint_read_by_call": ([Reason.INPLACE], [Reason.INPLACE]),
    "dst_src_clone": ([Reason.INPLACE], [Reason.INPLACE]),
    # lists that are None or hold None: one decision per tensor given
    "optional_list_arg": ([Reason.INPLACE] * 2, [Reason.INPLACE] * 2),
    "list_of_optional_arg": ([Reason.INPLACE] * 3, [Reason.INPLACE] * 3),
    # v1 hands unfold views to v2 (Note [Writing back unfold views]); the read of x[1, 2:4]
    # misses the windows (Note [Exact small regions]), so x is written in place
    "unfold_gaps": ([Reason.INPLACE] * 2, [Reason.INPLACE] * 2),
    # ops returning their arguments (Note [Ops that return their arguments])
    "returns_its_argument": ([Reason.INPLACE], [Reason.INPLACE]),
    "returns_its_out": ([Reason.INPLACE] * 2, [Reason.INPLACE] * 2),
}


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n in corpus.PROGRAMS))
def test_decisions(name, strategy):
    captured = run(corpus.PROGRAMS[name])
    v1, v2 = EXPECTED[name]
    assert reasons(captured) == (v1 if strategy == "v1" else v2)
    assert clones(captured) == sum(r is not Reason.INPLACE for r in reasons(captured))


def _sink_after_hop(pred, hop_index=0):
    """A ``before_pass`` that moves the first node matching ``pred`` (with the view chain that
    feeds it) right after the ``hop_index``-th HOP call, as a post-grad reorder pass might. In
    a functional graph this keeps the program's meaning: the node still reads the old value."""

    def move(gm):
        hops = [n for n in gm.graph.nodes if n.target in mutation_targets()]
        node = next(n for n in gm.graph.nodes if pred(n))
        chain, arg = [node], node.args[0]
        while arg.op == "call_function" and arg.target in (aten.select.int, aten.slice.Tensor):
            chain.append(arg)
            arg = arg.args[0]
        prev = hops[hop_index]
        for n in reversed(chain):  # producers first
            if n is node or all(u in chain for u in n.users):
                prev.append(n)
                prev = n

    return move


def _old_row_read_program(read_row):
    def f(x, y):
        buf = x * 1
        old = buf[read_row].sum()  # traced before the call; the reorder moves it after
        corpus.add_(buf[1], y)
        return buf, old

    return f


@pytest.mark.parametrize("read_row", [0, 1])
def test_old_value_read_after_the_call(strategy, read_row):
    # After the reorder the graph reads the *old* buf[read_row] below the call. Row 1 is what
    # the op writes: keep the clone. Row 0 is disjoint: in place (v1 scatters its clone back
    # into buf, which reads the old buf only around row 1).
    fn = _old_row_read_program(read_row)
    is_sum = lambda n: n.target is aten.sum.default  # noqa: E731
    captured = run(fn, [torch.randn(4, 5), torch.randn(5)], before_pass=_sink_after_hop(is_sum))
    (d,) = captured.report.decisions
    if read_row == 0:
        assert d.reason is Reason.INPLACE
    else:
        assert d.reason is Reason.READ_LATER and not d
    if strategy == "v2" and read_row == 1:
        assert d.detail.startswith("by sum")


# -- the trap of PyTorch PR #198260 ------------------------------------------------------------


def _drop_clones(gm):
    """What Inductor's no-op removal does to ``y = x.clone()`` feeding a functional op."""
    for n in list(gm.graph.nodes):
        if n.target is aten.clone.default:
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)


def test_dst_and_src_alias_after_clone_removal(strategy):
    # op(dst=x, src=y) with y = x.clone(): once the clone is gone both arguments are x, and
    # writing x in place would let the op read what it already overwrote.
    program = corpus.PROGRAMS["dst_src_clone"]
    captured = run(program, before_pass=_drop_clones)
    (d,) = captured.report.decisions
    assert d.reason is Reason.READ_BY_CALL and d.detail == "arg0_1"


def test_disjoint_slices_of_one_buffer_go_in_place():
    with corpus_registered("v2"):
        captured = run(corpus.PROGRAMS["disjoint_read_by_call"])
    assert reasons(captured) == [Reason.INPLACE]


# -- the vLLM case: a reorder moves a read of kv[l, 0] below layer l+1's write ----------------


def _kv_program(read_index):
    def f(kv, rows, index):
        outs = []
        for layer in range(kv.shape[0]):
            corpus.write_rows(kv[layer, 0], rows[layer], index)
            outs.append(kv[read_index(layer), 0].sum())
        return torch.stack(outs)

    return f


@pytest.mark.parametrize("read_next", [False, True])
def test_reordered_read_of_previous_layer(read_next):
    # Layer 0's read of kv[0, 0] (of the cache as layer 0 left it) now sits after layer 1's
    # write into kv[1, 0]. The regions are disjoint, so layer 1 still writes in place. If the
    # read is of kv[1, 0] instead (what layer 1 overwrites), layer 1 must clone.
    inputs = [torch.zeros(2, 2, 8, 4), torch.randn(2, 2, 4), torch.tensor([1, 5])]
    fn = _kv_program((lambda l: l + 1 if l + 1 < 2 else l) if read_next else (lambda l: l))
    with corpus_registered("v2"):
        is_sum = lambda n: n.target is aten.sum.default  # noqa: E731
        captured = run(fn, inputs, before_pass=_sink_after_hop(is_sum, hop_index=1))
    expected = [Reason.INPLACE, Reason.READ_LATER if read_next else Reason.INPLACE]
    assert reasons(captured) == expected


# -- graph inputs ------------------------------------------------------------------------------


def _drop_epilogue(gm):
    for n in list(gm.graph.nodes):
        if n.target is aten.copy_.default and n.args[0].op == "placeholder":
            gm.graph.erase_node(n)


def test_graph_input_without_copy_back_is_cloned():
    with corpus_registered("v2"):
        fn = corpus.PROGRAMS["input_inplace"].fn
        compiled, captured = compile_capture(fn, before_pass=_drop_epilogue)
        x, y = torch.randn(4, 5), torch.randn(5)
        x_before = x.clone()
        compiled(x, y)
    (d,) = captured.report.decisions
    assert d.reason is Reason.GRAPH_INPUT
    assert torch.equal(x, x_before)  # the graph no longer writes x, and neither did the op


def test_epilogue_self_copy_is_removed():
    with corpus_registered("v2"):
        captured = run(corpus.PROGRAMS["input_inplace"])
    gm = captured.modules[0]
    assert count_targets(gm, lambda t: t is aten.copy_.default) == 0


# -- the same buffer twice ---------------------------------------------------------------------


def test_same_buffer_passed_twice_to_the_hop_is_cloned_once():
    # A v1 HOP whose two mutable arguments are one node (Inductor removed ``y = x.clone()`` as
    # a no-op): its semantics give each a separate copy, so only one of them may be written in
    # place, the other copied from the old value (Note [One memory, two mutable buffers]).
    def f(x):
        y = x + 1
        out = autofunc.auto_functionalized_v1("autofunc_corpus::two.default", a=y, b=y)
        return out[0] + out[1]

    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(3)
    gm = make_fx(f, tracing_mode="fake")(x)
    report = autofunc.reinplace(gm)
    assert [d.reason for d in report.decisions] == [Reason.INPLACE, Reason.SAME_BUFFER_TWICE]
    assert torch.allclose(gm(x), f(x))


# -- meta and report ---------------------------------------------------------------------------


def test_new_nodes_have_fake_values(strategy):
    captured = run(corpus.PROGRAMS["list_arg"])
    for n in captured.modules[0].graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            assert "val" in n.meta, n.format_node()


def test_disabled_pass_clones_everything(strategy):
    program = corpus.PROGRAMS["note_select"]
    compiled, captured = compile_capture(program.fn, reinplace_pass=False)
    compiled(*program.inputs())
    gm = captured.modules[0]
    report = autofunc.reinplace(gm, enable=False)
    assert {d.reason for d in report.decisions} == {Reason.DISABLED}
    out = gm(*program.inputs())
    assert torch.allclose(out[-1] if isinstance(out, (list, tuple)) else out, program.fn(*program.inputs()))


def test_report_renders_a_table():
    with corpus_registered("v2"):
        report = autofunc.explain(corpus.PROGRAMS["kv_layers"].fn, *corpus.PROGRAMS["kv_layers"].inputs(), backend="aot_eager")
    text = str(report)
    assert "autofunc_corpus::write_rows.default" in text and "[0, 1]" in text
    assert report.num_clones == 0 and report.bytes_saved == 6 * 8 * 4 * 4 * 2 * 3
    assert f"{len(report.calls)} call(s), 0 clone(s)" in text


class TestReinplacedGraphs(expecttest.TestCase):
    def test_kv_cache_input_two_layers_v2(self):
        # each layer writes kv[layer, 0] of the cache input: no clone, no epilogue copy
        def f(kv, rows, index):
            for layer in range(2):
                corpus.write_rows(kv[layer, 0], rows[layer], index)

        inputs = [torch.zeros(2, 2, 8, 4), torch.randn(2, 2, 4), torch.tensor([1, 5])]
        with corpus_registered("v2"):
            captured = run(f, inputs)
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1, arg1_1, arg2_1):
    select_2 = torch.ops.aten.select.int(arg1_1, 0, 0)
    select_int = torch.ops.aten.select.int(arg0_1, 0, 0)
    select_int_1 = torch.ops.aten.select.int(select_int, 0, 0)
    write_rows_default = torch.ops.autofunc_corpus.write_rows.default(select_int_1, select_2, arg2_1)
    select_6 = torch.ops.aten.select.int(arg1_1, 0, 1)
    select_int_2 = torch.ops.aten.select.int(arg0_1, 0, 1)
    select_int_3 = torch.ops.aten.select.int(select_int_2, 0, 0)
    write_rows_default_1 = torch.ops.autofunc_corpus.write_rows.default(select_int_3, select_6, arg2_1)
    return ()""")

    def test_chains_of_one_call_share_their_prefix_v2(self):
        # two(kv[l, 0], kv[l, 1]): one select(kv, 0, l) feeds both arguments, and each argument
        # is still a node of its own
        def f(kv):
            for layer in range(2):
                corpus.two(kv[layer, 0], kv[layer, 1])

        with corpus_registered("v2"):
            captured = run(f, [torch.randn(2, 2, 3)])
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1):
    select_int = torch.ops.aten.select.int(arg0_1, 0, 0)
    select_int_1 = torch.ops.aten.select.int(select_int, 0, 0)
    select_int_2 = torch.ops.aten.select.int(select_int, 0, 1)
    two_default = torch.ops.autofunc_corpus.two.default(select_int_1, select_int_2)
    select_int_3 = torch.ops.aten.select.int(arg0_1, 0, 1)
    select_int_4 = torch.ops.aten.select.int(select_int_3, 0, 0)
    select_int_5 = torch.ops.aten.select.int(select_int_3, 0, 1)
    two_default_1 = torch.ops.autofunc_corpus.two.default(select_int_4, select_int_5)
    return ()""")

    def test_input_row_v1(self):
        with corpus_registered("v1"):
            captured = run(corpus.PROGRAMS["input_row"])
        self.assertExpectedInline(captured.reinplaced[0], """\
def forward(self, arg0_1, arg1_1):
    select = torch.ops.aten.select.int(arg0_1, 0, 1)
    add__default = torch.ops.autofunc_corpus.add_.default(select, arg1_1)
    mul = torch.ops.aten.mul.Tensor(arg0_1, 2)
    return (mul,)""")


class corpus_registered:
    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        self.regs = corpus.register_all(self.strategy)

    def __exit__(self, *exc):
        for r in self.regs:
            r.remove()


# -- dtype views: a uint8 KV cache written through fp8 views (Note [Views of graph inputs]) -----


def _fp8_inputs():
    return [torch.zeros(2, 2, 8, 4, dtype=torch.uint8), torch.randn(2, 2, 4), torch.tensor([1, 5])]


def test_fp8_kv_cache_views_go_in_place(strategy):
    captured = run(corpus.PROGRAMS["kv_fp8_layers"], _fp8_inputs())
    assert reasons(captured) == [Reason.INPLACE] * 4
    assert clones(captured) == 0
    gm = captured.modules[0]
    # every write-back scatter folded, the epilogue copy a self-copy removed
    assert count_targets(gm, lambda t: t is aten.select_scatter.default) == 0
    assert count_targets(gm, lambda t: t is aten.copy_.default) == 0


def test_same_dtype_view_of_an_input_goes_in_place(strategy):
    captured = run(corpus.PROGRAMS["cache_same_dtype_view"])
    assert reasons(captured) == [Reason.INPLACE]


def _fp8_old_row_program(read_layer):
    def f(kv, rows, index):
        old = kv[read_layer].sum()  # traced before the call; the reorder moves it after
        corpus.write_rows_fp8(kv[1, 0].view(torch.float8_e4m3fn), rows[0], index)
        return old

    return f


@pytest.mark.parametrize("read_layer", [0, 1])
def test_fp8_view_old_value_read_after_the_call(read_layer):
    # Layer 1 is what the op writes through its fp8 view: a read of the old kv[1] moved below
    # the call keeps the clone (in bytes, the fp8 view and the uint8 layer overlap). Layer 0 is
    # disjoint: in place.
    fn = _fp8_old_row_program(read_layer)
    is_sum = lambda n: n.target is aten.sum.default  # noqa: E731
    with corpus_registered("v2"):
        captured = run(fn, _fp8_inputs(), before_pass=_sink_after_hop(is_sum))
    (d,) = captured.report.decisions
    assert d.reason is (Reason.READ_LATER if read_layer == 1 else Reason.INPLACE)


def test_view_of_input_without_copy_back_is_cloned():
    with corpus_registered("v2"):
        fn = corpus.PROGRAMS["cache_same_dtype_view"].fn
        compiled, captured = compile_capture(fn, before_pass=_drop_epilogue)
        cache, rows = corpus.PROGRAMS["cache_same_dtype_view"].inputs()
        before = cache.clone()
        compiled(cache, rows)
    (d,) = captured.report.decisions
    assert d.reason is Reason.GRAPH_INPUT  # no copy-back after the call: rule (4)
    assert torch.equal(cache, before)


def garbage_left_by(run):
    """``(run(), the objects in reference cycles it left)``, counting only what ``run`` made:
    every object the GC tracks before the call is kept alive through it (so garbage made
    earlier, anywhere in the process, is not collected here), and what one full collection
    after the call finds unreachable is returned (``DEBUG_SAVEALL``) rather than freed."""
    import gc

    gc.collect()
    before = gc.get_objects()
    debug = gc.get_debug()
    gc.disable()
    gc.set_debug(debug | gc.DEBUG_SAVEALL)
    try:
        result = run()
        gc.collect()
        found = list(gc.garbage)
        gc.garbage.clear()
    finally:
        gc.set_debug(debug)
        gc.enable()
        del before
    return result, found


@pytest.mark.parametrize("policy", [GENERIC, INDUCTOR], ids=str)
def test_the_pass_leaves_no_cyclic_garbage(strategy, policy):
    # Garbage in reference cycles is freed only by the cyclic GC, whose full collections walk
    # the whole heap of a compiling process: the pass makes none (bench-compile counts the
    # collections that fire inside it). The first run may initialize torch's own lazy state (a
    # fake kernel's first call), so the second is the one checked, its memos cleared first.
    import torch.fx as fx
    from torch.fx._lazy_graph_module import _LazyGraphModule

    from autofunc import regions
    from autofunc.views import inference

    program = corpus.PROGRAMS["kv_layers"]
    compiled, captured = compile_capture(program.fn, reinplace_pass=False)
    compiled(*program.inputs())
    for _ in range(2):
        graph = fx.Graph()
        graph.output(graph.graph_copy(captured.modules[0].graph, {}))
        gm = _LazyGraphModule(captured.modules[0], graph)  # recompiles lazily, as in Inductor
        inference._infer.cache_clear()
        regions._region.cache_clear()
        report, garbage = garbage_left_by(functools.partial(autofunc.reinplace, gm, policy=policy))
    assert report.decisions
    assert garbage == [], [type(o).__name__ for o in garbage[:20]]

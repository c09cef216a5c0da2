"""The backend policy of the re-inplace pass (``autofunc.passes.policy``): the Inductor glue
passes ``INDUCTOR``, the two built-in policies decide one graph differently where Inductor
differs (the rule "a read the backend evaluates late"), and the deprecated ``for_inductor`` still picks
them."""

import pytest
import torch
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule

import autofunc
from autofunc import Reason
from autofunc.passes.emit import CloneKind
from autofunc.backends.inductor.policy import INDUCTOR, InductorPolicy
from autofunc.passes.policy import GENERIC, Policy
from autofunc.passes.report import Report
from autofunc.testing import compile_capture, same_result
from tools import corpus


def lazy_read(x, y):
    b = x * 1
    c = b + 1  # read before the call, needed after it: Inductor computes it late
    corpus.add_(b[0], y)
    return (c + b[0]).sum(1)  # c's user reads the new b too: it cannot move before the call


def _inputs():
    return torch.randn(6, 5), torch.randn(5)


def _functional_graph(fn):
    """The functional forward graph of ``fn`` and a function that gives a fresh copy of it."""
    compiled, captured = compile_capture(fn, reinplace_pass=False)
    compiled(*_inputs())
    (gm,) = captured.modules

    def fresh():
        graph = fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        return _LazyGraphModule(gm, graph)

    return gm, fresh


def test_the_inductor_glue_passes_the_inductor_policy(monkeypatch):
    from autofunc.backends.inductor import glue as inductor

    seen = []

    def spy(gm, **kwargs):
        seen.append(kwargs)
        return Report()

    monkeypatch.setattr(inductor, "reinplace", spy)
    gm = fx.symbolic_trace(lambda x: x + 1)
    inductor.ReinplacePass()(gm.graph, is_inference=True)
    (kwargs,) = seen
    assert kwargs["policy"] is INDUCTOR
    assert "for_inductor" not in kwargs


def test_the_policies_differ_where_inductor_does():
    assert isinstance(INDUCTOR, InductorPolicy) and isinstance(INDUCTOR, Policy)
    assert type(GENERIC) is Policy
    assert GENERIC.late_reads() is None and INDUCTOR.late_reads().taken is not None
    gm = fx.symbolic_trace(lambda x: x + 1)
    x, add = list(gm.graph.nodes)[:2]
    assert not GENERIC.chooses_layout(add) and INDUCTOR.chooses_layout(add)
    assert not INDUCTOR.chooses_layout(x)  # a graph input keeps the strides it comes with
    assert not GENERIC.must_fold_scatters(x) and INDUCTOR.must_fold_scatters(x)
    add.args = (add, 1)  # a node that uses itself: lint objects
    with pytest.raises(RuntimeError):
        GENERIC.lint(gm.graph)
    INDUCTOR.lint(gm.graph)  # Inductor lints after its own passes
    assert GENERIC.repairs_before() == GENERIC.repairs_after() == ()
    assert INDUCTOR.repairs_before() and INDUCTOR.repairs_after()
    assert (str(GENERIC), str(INDUCTOR)) == ("generic", "inductor")


def test_a_lazy_read_objects_only_under_inductor(strategy):
    # "a read the backend evaluates late": GENERIC runs ``b + 1`` where it stands, before the call, so
    # ``b`` is written in place; Inductor may compute it after the call (as big as the buffer:
    # it keeps the clone).
    original, fresh = _functional_graph(lazy_read)
    x, y = _inputs()
    for policy, reason in [(GENERIC, Reason.INPLACE), (INDUCTOR, Reason.LAZY_READ)]:
        gm = fresh()
        (d,) = autofunc.reinplace(gm, is_inference=True, policy=policy).decisions
        assert d.reason is reason, (policy, d.explain())
        assert same_result(gm(x.clone(), y), original(x.clone(), y))


def test_a_policy_is_asked_not_read():
    # The pass asks the policy through its methods; it holds no flag the pass would read.
    data = {k for k, v in vars(Policy).items() if not k.startswith("_") and not callable(v)}
    assert data == {"name"}
    assert not {k for k, v in vars(InductorPolicy).items() if not k.startswith("_")} - (
        set(vars(Policy)) | {"name"}
    )


def test_for_inductor_is_a_deprecated_alias_of_the_policy(strategy):
    _, fresh = _functional_graph(lazy_read)
    for flag, reason in [(False, Reason.INPLACE), (True, Reason.LAZY_READ)]:
        with pytest.warns(DeprecationWarning, match="policy="):
            report = autofunc.reinplace(fresh(), is_inference=True, for_inductor=flag)
        assert [d.reason for d in report.decisions] == [reason]
    with pytest.raises(TypeError, match="not both"):
        autofunc.reinplace(fresh(), policy=INDUCTOR, for_inductor=True)


def strided_write(x, y):
    corpus.add_(x, y)  # ``x`` is transposed: no ``clone`` keeps its strides
    return x.sum(0)


def _strided_graph():
    """The functional graph of ``strided_write`` and inputs for it; with ``enable=False``
    every buffer keeps its clone."""
    inputs = lambda: (torch.randn(6, 4).t(), torch.randn(4, 6))  # noqa: E731
    regs = corpus.register_all("v1")
    try:
        compiled, captured = compile_capture(strided_write, reinplace_pass=False)
        compiled(*inputs())
    finally:
        for r in regs:
            r.remove()
    (gm,) = captured.modules
    return gm, inputs


def _copy_targets(gm, before=()):
    """The copying nodes of ``gm`` not in ``before`` (the graph's own, by name)."""
    aten = torch.ops.aten
    kinds = {aten.empty_strided.default, aten.copy_.default, aten.as_strided_scatter.default}
    kinds |= {aten.full.default, aten.clone.default}
    return sorted(
        str(n.target) for n in gm.graph.nodes if n.target in kinds and n.name not in before
    )


@pytest.mark.parametrize(
    "policy, copies",
    [
        # the backend keeps the recorded strides: an exact copy, no span
        (GENERIC, ["aten.copy_.default", "aten.empty_strided.default"]),
        # Inductor chooses layouts: a span whose layout is fixed (Note [Clones for Inductor])
        (INDUCTOR, ["aten.as_strided_scatter.default", "aten.full.default"]),
    ],
    ids=str,
)
def test_which_copy_a_cloned_buffer_gets_is_the_policys(policy, copies):
    gm, inputs = _strided_graph()
    expected_inputs = inputs()
    x, y = (torch.empty_strided(t.size(), t.stride()).copy_(t) for t in expected_inputs)
    expected = strided_write(*expected_inputs)
    own = {n.name for n in gm.graph.nodes}
    report = autofunc.reinplace(gm, enable=False, is_inference=True, policy=policy)
    assert [d.reason for d in report.decisions] == [Reason.DISABLED]
    assert _copy_targets(gm, own) == copies
    (out,) = gm(x, y)
    assert same_result(out, expected)
    assert same_result(x, expected_inputs[0])  # the op's write copied back into the input


class _Recording(Policy):
    """A backend of the test's own: spans for every copy, a repair before and after, plain
    aliases. Nothing outside this class is changed to add it."""

    name = "recording"

    def __init__(self):
        self.seen = []

    def repairs_before(self):
        return (lambda graph: self.seen.append(("before", len(graph.nodes))),)

    def repairs_after(self):
        return (lambda ctx: self.seen.append(("after", len(ctx.gm.graph.nodes))),)

    def copy(self, ctx, node, buf=None, m=None):
        return CloneKind.SPAN


def test_a_new_backend_is_a_policy_subclass():
    gm, inputs = _strided_graph()
    expected_inputs = inputs()
    x, y = (torch.empty_strided(t.size(), t.stride()).copy_(t) for t in expected_inputs)
    expected = strided_write(*expected_inputs)
    policy = _Recording()
    own = {n.name for n in gm.graph.nodes}
    autofunc.reinplace(gm, enable=False, is_inference=True, policy=policy)
    assert [stage for stage, _ in policy.seen] == ["before", "after"]
    assert _copy_targets(gm, own) == ["aten.as_strided_scatter.default", "aten.full.default"]
    assert same_result(gm(x, y)[0], expected)
    assert same_result(x, expected_inputs[0])
    assert str(policy) == "recording"


def _lazy_nodes(f, tracing_mode, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    from autofunc.backends.inductor.policy import lazy_under_inductor

    gm = make_fx(f, tracing_mode=tracing_mode)(*inputs)
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    return {n.name: lazy_under_inductor(n) for n in calls if n.target != torch.ops.aten.sym_size.int}


def test_reductions_inductor_computes_where_they_stand():
    # Note [Reductions Inductor computes where they stand]
    def f(big, small):
        rs = big.sum(), big.amax(0), big.mean(), small.sum(1), small.sum(), big * 2
        return sum(r.sum() for r in rs)  # none of them returned

    # 54 elements reduced; 6 elements into 9 (unrolled); 54; 2 (unrolled); 4 into one on a CPU;
    # a pointwise node
    first = ["sum_1", "amax", "mean", "sum_2", "sum_3", "mul"]
    lazy = _lazy_nodes(f, "fake", torch.randn(6, 3, 3), torch.randn(2, 2))
    assert [lazy[n] for n in first] == [False, True, False, True, False, True]
    lazy = _lazy_nodes(f, "symbolic", torch.randn(6, 3, 3), torch.randn(2, 2))
    assert [lazy[n] for n in first] == [True] * 6  # sizes not known: lazy, as every aten node


def test_returned_values_inductor_computes_where_they_stand():
    # Note [Returned values Inductor computes where they stand]
    def f(x):
        return x * 2, x.sum() * 2, x[0], x.select_scatter(x[0] * 3, 0, 1), (x + 1).t()

    lazy = _lazy_nodes(f, "fake", torch.randn(3, 4))
    # returned: x * 2 computed where it stands; the 0-d product, the scatter and the
    # transposed sum stay lazy (a view is returned, its base is what is computed)
    assert lazy["mul"] is False and lazy["mul_1"] is True
    assert lazy["select_scatter"] is True and lazy["add"] is True


def test_scans_inductor_runs_as_extern_kernels_on_a_cpu():
    # Note [Scans Inductor runs as extern kernels]
    import torch._inductor.config as inductor_config

    def f(x, s):
        return (x.cumsum(1).sum(), x.cumprod(0).sum(), s.cumsum(0).sum())

    inputs = (torch.randn(3, 4), torch.randn(()))
    lazy = _lazy_nodes(f, "fake", *inputs)
    assert [lazy[n] for n in ("cumsum", "cumprod", "cumsum_1")] == [False, False, True]  # 0-d
    with inductor_config.patch(cpu_backend="triton"):  # a backend with scans: lowered lazily
        lazy = _lazy_nodes(f, "fake", *inputs)
    assert [lazy[n] for n in ("cumsum", "cumprod")] == [True, True]


def _pins_keep_layouts(f, *inputs):
    """``pin_keeps_layout`` of every scatter of ``make_fx(f)`` (fake values), by node name."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from autofunc.backends.inductor.evaluation import pin_keeps_layout
    from autofunc.backends.inductor.repairs import INPLACEABLE

    gm = make_fx(f, tracing_mode="fake")(*inputs)
    return {n.name: pin_keeps_layout(n) for n in gm.graph.nodes if n.target in INPLACEABLE}


def test_a_scatter_keeps_its_pinned_layout_only_over_memory_laid_out_as_recorded():
    # Note [A pinned scatter Inductor rewrites]: Inductor may write a scatter into its input
    def f(a, c):
        into_input = a.slice_scatter(a[1:3] * 2, 0, 1, 3)  # input memory: as recorded
        computed = c * 1.0  # a computed value, laid out contiguously unless asked otherwise
        into_computed = computed.slice_scatter(computed[1:3] * 2, 0, 1, 3)
        d = into_input.diagonal_scatter(into_input.diagonal(3) * 2, 3)  # may become a clone
        return into_computed, d

    gappy = torch.randn(8, 6)[::2]  # strides (12, 1)
    kept = _pins_keep_layouts(f, gappy, torch.randn(4, 6))
    assert kept == {"slice_scatter": True, "slice_scatter_1": True, "diagonal_scatter": False}
    kept = _pins_keep_layouts(f, gappy, torch.randn(6, 4).t())  # c * 1.0 recorded (1, 4)
    assert kept["slice_scatter_1"] is False


def test_a_scatter_over_memory_inductor_may_pad_keeps_no_pinned_layout():
    # on a GPU Inductor pads strides above 1024 elements of a buffer it lays out itself
    from autofunc.backends.inductor.evaluation import _unpadded

    with torch._subclasses.fake_tensor.FakeTensorMode():
        small, large = torch.empty(4, 6, device="meta"), torch.empty(2, 2000, device="meta")
    assert _unpadded(small) and not _unpadded(large)
    assert _unpadded(torch.empty(2, 2000))  # a CPU: no padding


def test_a_diagonal_scatter_into_an_input_keeps_its_layout_where_inductor_writes_the_input():
    # Note [A pinned scatter Inductor rewrites]: a diagonal scatter Inductor does not write
    # into its input becomes a clone of the input, laid out densely; it writes the input only
    # where the graph copies a value back into it and nothing reads the input in between
    def written_back(b, x):
        s = torch.diagonal_scatter(b, b.diagonal(-1) + x.sum(), -1)
        b.copy_(s)
        return x * 2

    def read_in_between(b, x):
        s = torch.diagonal_scatter(b, b.diagonal(-1) + x.sum(), -1)
        y = b * 2  # the input's old value, after the scatter
        b.copy_(s)
        return y

    gappy, x = torch.randn(6, 3, 2)[::2], torch.randn(3)  # strides (12, 2, 1): not dense
    assert _pins_keep_layouts(written_back, gappy, x) == {"diagonal_scatter": True}
    assert _pins_keep_layouts(read_in_between, gappy, x) == {"diagonal_scatter": False}
    assert _pins_keep_layouts(read_in_between, torch.randn(3, 3, 2), x) == {
        "diagonal_scatter": True  # dense: a clone has its layout
    }

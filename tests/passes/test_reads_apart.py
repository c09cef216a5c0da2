"""Note [A write that reads its own memory elsewhere] (backends/inductor/reads_apart.py): a copy
into a graph input, after a call that wrote the input in place, whose value reads the input at
other elements than it writes; checked against eager under Inductor (outputs and final
inputs), with the copies the repair adds."""

import pytest
import torch
import torch._inductor.config as inductor_config

import autofunc
from autofunc.passes.copies import CopyKind
from autofunc.reports import collect_reports
from autofunc.testing import run_against_eager
from tools import fuzzing as fuzz  # the autofunc_fuzz ops


@torch.library.custom_op("autofunc_reads_apart::scale", mutates_args={"x"})
def scale(x: torch.Tensor) -> None:
    x.mul_(1.5)


@pytest.fixture(params=["v1", "v2"])
def strategy(request):
    reg = autofunc.register(scale, strategy=request.param)
    yield request.param
    reg.remove()


def check_inductor(fn, *inputs):
    check = run_against_eager(fn, torch.compile(fn, fullgraph=True), inputs)
    assert check.correct, check.mismatch


def _repairs(reports):
    return [c.nbytes for r in reports for c in r.copies if c.kind is CopyKind.REPAIR]


def _checked(fn, *inputs):
    """``fn`` against eager under Inductor; the bytes of each copy the repairs added."""
    torch._dynamo.reset()
    with collect_reports() as reports:
        check_inductor(fn, *inputs)
    return _repairs(reports)


def one_element_broadcast(b):
    scale(b)
    b[1, :, 0].add_(b[1, 0, 0] * 2)  # b[1, 0, 0] is written first, then read twice


def flipped(b):
    scale(b)
    b.copy_(b.flip(0) + 1)


def reduced_and_broadcast(b):
    scale(b)
    b.add_(b[0].sum() * 0.5)  # Inductor computes the sum into a buffer of its own first


def shifted_rows(b):
    scale(b)
    b[1:3] = b[0:2].clone() + 1.0  # Inductor drops the clone: row 1 is read after it is written


def unrolled_reduction(b):
    scale(b)
    b.add_(b[..., :2].sum(-1, keepdim=True))  # a sum of two elements Inductor computes inline


def _b():
    torch.manual_seed(0)
    return torch.randn(5, 3, 8, dtype=torch.float64)  # rows longer than one vector


@pytest.mark.parametrize(
    "fn, nbytes",
    [
        (one_element_broadcast, [8]),
        (flipped, [5 * 3 * 8 * 8]),
        (unrolled_reduction, [5 * 3 * 8]),
        (shifted_rows, [2 * 3 * 8 * 8]),
    ],
    ids=["one_element_broadcast", "flipped", "unrolled_reduction", "shifted_rows"],
)
def test_a_value_read_apart_is_computed_first(strategy, fn, nbytes):
    # PyTorch's built-in writes these wrong (its own op writes b in place the same way)
    assert _checked(fn, _b()) == nbytes


def row_from_another_row(b):
    scale(b)
    b[1].add_(b[0])  # reads memory the write leaves as it was


def row_scaled(b):
    scale(b)
    b[1, :, 0].mul_(b[1, :, 0])  # reads each element where it writes it


def diagonal_written_twice(b):
    scale(b)
    d = b[0].diagonal()
    d.mul_(0.5)
    d.mul_(2.0)  # reads the first write through the same view


def element_of_a_flat_view(b):
    scale(b)
    b.view(-1)[3:][20].mul_(2.0)  # the scatter is reshaped back into b's shape


def unsqueezed_input_scaled(b):
    scale(b)
    b.unsqueeze(2).mul_(-1.0)  # written through a view that only regroups b's elements


def index_put_after_a_call(b):
    scale(b)
    b.index_put_((torch.tensor([1, 3]),), torch.ones(2, 3, 8, dtype=b.dtype), accumulate=True)


def before_the_call(b):
    r = b[1, 0, 0] * 2  # read before the call: the value eager adds is the old one
    scale(b)
    b[1, :, 0].add_(r)
    return r


@pytest.mark.parametrize(
    "fn",
    [
        row_from_another_row,
        row_scaled,
        diagonal_written_twice,
        element_of_a_flat_view,
        unsqueezed_input_scaled,
        index_put_after_a_call,
        before_the_call,
        reduced_and_broadcast,
    ],
)
def test_reads_where_nothing_changes_are_left(strategy, fn):
    assert _checked(fn, _b()) == []


def shrunk_20261937_164(a, b):
    v0 = b[1, :, 0]
    v1 = v0[-3]
    fuzz.m3way(v1, b, b)
    v2 = v1.as_strided([1], [1], 25)
    r3 = v1.sum() * -2.0
    v0.add_(r3)
    fuzz.mcache(v2, v2, torch.tensor([0]))
    r3.mul_(0.5)
    return (r3,)


@pytest.mark.parametrize("fuzz_strategy", ["v1", "v2"])
def test_fuzz_20261937_164(fuzz_strategy):
    # the sum of b[1, 0, 0] was computed inline where b[1, :, 0] is written (v1 and v2; the
    # built-in keeps a copy of b there)
    torch.manual_seed(0)
    a = torch.randn(6, dtype=torch.float64)[1:]
    b = torch.randn(5, 3, 2, dtype=torch.float64)
    with autofunc.override(fuzz_strategy, fuzz.OPS), inductor_config.patch(fx_graph_cache=False):
        torch._dynamo.reset()
        with collect_reports() as reports:
            check_inductor(shrunk_20261937_164, a, b)
    assert _repairs(reports) == [8]


@pytest.mark.parametrize("fn", [one_element_broadcast, flipped, diagonal_written_twice])
def test_dynamic_sizes(strategy, fn):
    # the walk compares symbolic geometry; a second size runs the same graph
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    for shape in [(5, 3, 2), (7, 3, 4)]:
        torch.manual_seed(0)
        b = torch.randn(*shape, dtype=torch.float64)
        check = run_against_eager(fn, compiled, (b,))
        assert check.correct, (shape, check.mismatch)

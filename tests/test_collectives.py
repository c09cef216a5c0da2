"""Collectives beside mutable ops, on PyTorch's fake process group (one process, rank 0 of 2;
every collective is a no-op, in eager and compiled alike): the decisions and results for each
all-reduce form a tensor-parallel serving stack uses on its KV cache."""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import autofunc
from autofunc import Reason
from autofunc.testing import compile_capture, run_against_eager
from tools import corpus

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is missing")


@torch.library.custom_op("autofunc_tp::all_reduce_", mutates_args={"x"})
def all_reduce_(x: torch.Tensor) -> None:
    """An in-place all-reduce as a custom op (vLLM's ``tensor_model_parallel_all_reduce`` shape)."""
    dist.all_reduce(x)


@pytest.fixture(scope="module", autouse=True)
def fake_group():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


@pytest.fixture
def registered(strategy):  # conftest's ``strategy`` registers the corpus ops
    reg = autofunc.register(all_reduce_, strategy=strategy)
    yield strategy
    reg.remove()


def inplace_all_reduce(kv, rows, index):
    corpus.write_rows(kv[0, 0], rows[0], index)
    dist.all_reduce(kv[0, 0])
    corpus.write_rows(kv[1, 1], rows[1], index)
    return rows.sum()


def functional_all_reduce(kv, rows, index):
    corpus.write_rows(kv[0, 0], rows[0], index)
    kv[0, 0].copy_(funcol.all_reduce(kv[0, 0], "sum", dist.group.WORLD))
    corpus.write_rows(kv[1, 1], rows[1], index)
    return rows.sum()


def custom_op_all_reduce(kv, rows, index):
    corpus.write_rows(kv[0, 0], rows[0], index)
    all_reduce_(kv[0, 0])
    corpus.write_rows(kv[1, 1], rows[1], index)
    return rows.sum()


FORMS = [inplace_all_reduce, functional_all_reduce, custom_op_all_reduce]


def _inputs():
    torch.manual_seed(0)
    return torch.zeros(2, 2, 64, 16), torch.randn(2, 2, 16), torch.tensor([1, 5])


@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_no_clone_of_the_cache_around_an_all_reduce(registered, fn):
    # The graph copies back the all-reduced value, not the last call's: the first call writes
    # the cache in place all the same (Note [Copied back later]).
    compiled, captured = compile_capture(fn)
    check = run_against_eager(fn, compiled, _inputs())
    assert check.correct, check.mismatch
    decisions = captured.report.decisions
    assert [d.reason for d in decisions] == [Reason.INPLACE] * len(decisions)
    assert len(decisions) == (3 if fn is custom_op_all_reduce else 2)


def test_under_inductor(registered):
    from autofunc.inductor import collect_reports

    with collect_reports() as reports:
        check = run_against_eager(
            inplace_all_reduce, torch.compile(inplace_all_reduce), _inputs()
        )
    assert check.correct, check.mismatch
    assert sum(r.num_clones for r in reports) == 0


def read_before_the_wait(x, y):
    ar = torch.ops._c10d_functional.all_reduce(x, "sum", "0")
    w = torch.ops._c10d_functional.wait_tensor(ar)
    corpus.add_(w, y)
    return ar * 2, w


@pytest.mark.parametrize("compile_with", ["capture", "inductor"])
def test_a_read_of_the_pre_wait_tensor_after_the_write(registered, compile_with):
    # Note [wait_tensor and the tensor it waits for]: in eager, wait_tensor returns its input,
    # so ``ar * 2`` reads the value the op wrote into ``w``; functionalization does not know
    # that, and its graph reads ``ar`` as it was. Writing ``w`` in place gives eager's result
    # (so does PyTorch's built-in); a clone of ``w`` would give the functional graph's.
    if compile_with == "capture":
        compiled, captured = compile_capture(read_before_the_wait)
    else:
        compiled = torch.compile(read_before_the_wait)
    check = run_against_eager(read_before_the_wait, compiled, (torch.ones(4, 8), torch.ones(8)))
    assert check.correct, check.mismatch
    assert check.expected[0][0, 0].item() == 4.0  # (1 + 1) * 2: the write is seen

"""Collectives beside mutable ops, on a process group of one process that plays rank 0 of 2
(``SumWithPeer``: the peer holds ``x + 1``, so an all-reduce makes ``x`` into ``2 x + 1``, in
eager and compiled alike; a dropped collective, or one moved before or after a write of the
tensor it reduces, changes the result): the decisions and results for each all-reduce form a
tensor-parallel serving stack uses on its KV cache."""

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


class SumWithPeer(dist.ProcessGroup):
    """Rank 0 of 2 in one process: the peer's tensor is always ``x + 1``, so an all-reduce (a
    sum) writes ``2 x + 1``. Unlike PyTorch's fake group, whose collectives change nothing, every
    all-reduce changes the value it reduces."""

    calls = 0

    def size(self) -> int:
        return 2

    def getBackendName(self) -> str:
        return _BACKEND

    @property
    def group_name(self) -> str:  # what functional collectives resolve the group by
        return dist.distributed_c10d._world.pg_names[self]

    def allreduce(self, tensor_list, opts=None):
        from torch._C._distributed_c10d import _create_work_from_future
        from torch.futures import Future

        assert opts is None or opts.reduceOp == dist.ReduceOp.SUM
        type(self).calls += 1
        with torch.no_grad():
            for t in tensor_list:
                t.mul_(2).add_(1)
        done = Future()
        done.set_result(tensor_list)
        return _create_work_from_future(done)


_BACKEND = "autofunc_sum_with_peer"


@pytest.fixture(scope="module", autouse=True)
def sum_with_peer_group():
    if not hasattr(dist.Backend, _BACKEND.upper()):
        dist.Backend.register_backend(
            _BACKEND, lambda store, rank, size, timeout: SumWithPeer(rank, size), devices=["cpu"]
        )
    dist.init_process_group(_BACKEND, store=dist.HashStore(), rank=0, world_size=2)
    yield
    dist.destroy_process_group()


def test_the_group_changes_values():
    x = torch.ones(3)
    dist.all_reduce(x)
    assert x.tolist() == [3.0, 3.0, 3.0]
    assert funcol.all_reduce(torch.zeros(2), "sum", dist.group.WORLD).tolist() == [1.0, 1.0]


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


def _check_reduced_once(kv, rows):
    """kv[0, 0] went through exactly one all-reduce after its write, kv[1, 1] through none."""
    expected = torch.zeros(64, 16) + 1  # the rows not written: 2 * 0 + 1
    expected[[1, 5]] = 2 * rows[0] + 1
    torch.testing.assert_close(kv[0, 0], expected)
    written = torch.zeros(64, 16)
    written[[1, 5]] = rows[1]
    torch.testing.assert_close(kv[1, 1], written)


@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_no_clone_of_the_cache_around_an_all_reduce(registered, fn):
    # The graph copies back the all-reduced value, not the last call's: the first call writes
    # the cache in place all the same (Note [Copied back later]).
    compiled, captured = compile_capture(fn)
    check = run_against_eager(fn, compiled, _inputs())
    assert check.correct, check.mismatch
    _check_reduced_once(check.inputs[0], check.inputs[1])
    decisions = captured.report.decisions
    assert [d.reason for d in decisions] == [Reason.INPLACE] * len(decisions)
    assert len(decisions) == (3 if fn is custom_op_all_reduce else 2)


@pytest.mark.parametrize("fn", FORMS, ids=lambda f: f.__name__)
def test_under_inductor(registered, fn):
    from autofunc.inductor import collect_reports

    # no cache hit: the pass must run on this graph and report it
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
        collect_reports() as reports,
    ):
        check = run_against_eager(fn, torch.compile(fn), _inputs())
    assert check.correct, check.mismatch
    _check_reduced_once(check.inputs[0], check.inputs[1])
    assert len(reports) == 1
    decisions = reports[0].decisions
    assert len(decisions) == (3 if fn is custom_op_all_reduce else 2)
    assert [d.reason for d in decisions] == [Reason.INPLACE] * len(decisions)


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
    assert check.expected[0][0, 0].item() == 8.0  # ((2 * 1 + 1) + 1) * 2: the write is seen
    assert check.expected[1][0, 0].item() == 4.0  # the all-reduced 3, plus 1

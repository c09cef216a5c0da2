"""Registrations that change while compiled code runs (Note [PyTorch's nodes run beside the
Functionalize kernel] in autofunc/registry/routing.py, Note [Registrations wait for compiles] in
autofunc/guards.py).

A graph compiled while an op was PyTorch's, autofunc v1's or v2's to handle must keep running
right when the handling changes under it: in the middle of a call (an op of the graph changes
it, so the rest of the graph runs after the change), before an exported program runs, and from
another thread that flips the registrations between this one's calls (aot_eager, which runs the
HOP nodes as they are, and Inductor).
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

import autofunc
from autofunc.registry import registered_strategy

_counter = itertools.count()
_PYTORCH_HOPS = (auto_functionalized, auto_functionalized_v2)


def _ops(pause: bool = False):
    """Fresh ops: ``change_`` runs what ``pending`` holds (the registration change) and, with
    ``pause``, lets other threads run; ``bump_`` (returns nothing: registered, it gets
    autofunc's Functionalize kernel) and ``add_sum`` (returns a tensor: no kernel)."""
    ns = f"aftest_changes{next(_counter)}"
    pending: list = []

    @torch.library.custom_op(f"{ns}::change_", mutates_args={"x"})
    def change_(x: torch.Tensor) -> None:
        x.mul_(2)
        while pending:
            pending.pop(0)()
        if pause:
            time.sleep(0.0005)  # another thread gets the GIL in the middle of a compiled call

    @torch.library.custom_op(f"{ns}::bump_", mutates_args={"x"})
    def bump_(x: torch.Tensor, y: torch.Tensor) -> None:
        x.add_(y)

    @torch.library.custom_op(f"{ns}::add_sum", mutates_args={"x"})
    def add_sum(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(y)
        return x.sum(0)

    @add_sum.register_fake
    def _(x, y):
        return x.new_empty(x.shape[1:])

    return change_, bump_, add_sum, pending


def _set(ops, strategy, handles):
    """Hand ``ops`` to ``strategy`` (``None``: back to PyTorch)."""
    while handles:
        handles.pop().remove()
    if strategy is not None:
        handles.append(autofunc.register(list(ops), strategy=strategy))


def _program(change_, bump_, add_sum):
    def f(kv, y):
        change_(kv)  # the change happens here, between two compiled calls of the ops
        bump_(kv[0], y)
        s = add_sum(kv[1], y * 2)
        return s + kv.sum()

    return f


def _check(fn, compiled, make_inputs):
    """``compiled`` against ``fn`` run eagerly afterwards: results and written inputs."""
    args = make_inputs()
    expected_args = [a.clone() for a in args]
    got = compiled(*args)
    expected = fn(*expected_args)
    torch.testing.assert_close(got, expected)
    for a, e in zip(args, expected_args):
        torch.testing.assert_close(a, e)


def _inputs():
    return torch.randn(2, 3, 4), torch.randn(3, 4)


_CHANGES = [(None, "v1"), (None, "v2"), ("v1", None), ("v2", None), ("v1", "v2"), ("v2", "v1")]


@pytest.mark.parametrize(
    "backend,before,after",
    # Inductor runs no HOP at run time (it decomposes them): two changes cover it
    [("aot_eager", *c) for c in _CHANGES] + [("inductor", None, "v2"), ("inductor", "v2", None)],
)
def test_a_change_in_the_middle_of_a_compiled_call(backend, before, after):
    change_, bump_, add_sum, pending = _ops()
    ops, handles = (bump_, add_sum), []
    _set(ops, "v2", handles)  # routed once: the dispatch rule is there from now on
    _set(ops, before, handles)
    fn = _program(change_, bump_, add_sum)
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, backend=counter)
    try:
        _check(fn, compiled, _inputs)
        assert counter.frame_count == 1
        # The second call passes the registrations guard, then changes them inside change_:
        # bump_ and add_sum run, compiled for `before`, under `after`.
        pending.append(lambda: _set(ops, after, handles))
        _check(fn, compiled, _inputs)
        assert counter.frame_count == 1 and not pending
        assert registered_strategy(bump_._opoverload) == after
        _check(fn, compiled, _inputs)  # the next call recompiles for `after`
        assert counter.frame_count == 2
    finally:
        _set(ops, None, handles)


def test_an_exported_program_runs_after_its_op_is_registered():
    # The program holds PyTorch's node of bump_; registering bump_ gives it autofunc's kernel,
    # which PyTorch's node once refused at run time ("Cannot auto-functionalize op").
    change_, bump_, add_sum, _ = _ops()
    fn = _program(change_, bump_, add_sum)

    class M(torch.nn.Module):
        def forward(self, kv, y):
            return fn(kv, y)

    ep = torch.export.export(M(), _inputs()).run_decompositions({})  # functional: PyTorch's nodes
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert targets & set(_PYTORCH_HOPS)
    handles = []
    for strategy in ("v1", "v2"):
        _set((bump_, add_sum), strategy, handles)
        try:
            _check(fn, ep.module(), _inputs)
        finally:
            _set((bump_, add_sum), None, handles)


def test_override_none_hands_an_op_with_its_kernel_to_pytorch():
    # bump_ returns nothing, so its registration installs autofunc's Functionalize kernel;
    # PyTorch's functionalization hands an op with such a kernel to the kernel, so the block
    # must take it away, and give it back at the end.
    change_, bump_, add_sum, _ = _ops()
    name = bump_._opoverload.name()
    fn = _program(change_, bump_, add_sum)
    with autofunc.register([bump_, add_sum], strategy="v1"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Functionalize")
        with autofunc.override(None, [bump_]):
            assert not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Functionalize")
            _check(fn, torch.compile(fn, backend="aot_eager"), _inputs)
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Functionalize")
        assert registered_strategy(bump_._opoverload) == "v1"


# -- another thread flips the registrations ------------------------------------------------------


def _fresh_program(k, change_, bump_, add_sum):
    """A function with a code object of its own (Dynamo compiles it afresh)."""
    source = (
        f"def f{k}(kv, y):\n"
        f"    change_(kv)\n"
        f"    bump_(kv[0], y + {k})\n"
        f"    s = add_sum(kv[1], y * 2)\n"
        f"    bump_(kv[1, :2], y[1:] * s)\n"
        f"    return s + kv.sum()\n"
    )
    scope = {"change_": change_, "bump_": bump_, "add_sum": add_sum}
    exec(compile(source, f"<registration changes {k}>", "exec"), scope)
    return scope[f"f{k}"]


def test_registrations_flipped_in_another_thread_between_compiled_calls():
    # Registering or removing an op changes PyTorch's dispatcher tables, which PyTorch does not
    # synchronize with a call of that op running in another thread (a segfault, 2 runs of about
    # 12 of the suite; docs/limitations.md): the flipper changes the registrations between the
    # other thread's calls, while it compiles new frames and runs compiled ones in between
    change_, bump_, add_sum, _ = _ops(pause=True)
    ops, handles = (bump_, add_sum), []
    done, errors, flips = threading.Event(), [], []
    calling = threading.Lock()  # held by the compiling thread around each call

    def flipper():
        try:
            for strategy in itertools.islice(itertools.cycle(["v1", None, "v2", None]), 2000):
                if done.is_set():
                    break
                with calling:
                    _set(ops, strategy, handles)
                flips.append(strategy)
                time.sleep(0.0005)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(("flipper", e))

    def worker():
        try:
            for backend, count in (("aot_eager", 8), ("inductor", 3)):
                for k in range(count):
                    fn = _fresh_program(k, change_, bump_, add_sum)
                    compiled = torch.compile(fn, backend=backend)
                    for _ in range(3):
                        with calling:
                            _check(fn, compiled, _inputs)
                        time.sleep(0.001)  # a window for the flipper
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(("compiling thread", e))
        finally:
            done.set()

    threads = [threading.Thread(target=flipper), threading.Thread(target=worker)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "a thread did not finish in 300 s"
    finally:
        done.set()
        for t in threads:
            t.join(30)
        _set(ops, None, handles)
    assert not errors, errors
    assert len(flips) > 4  # the registrations changed while the compiling thread ran

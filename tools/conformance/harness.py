"""The conformance harness: one *cell* is (program, strategy, backend).

A cell compiles the program under one backend with its ops handled by one strategy, calls it
``program.calls`` times on fresh inputs, and checks each call against eager: the outputs AND
the final value of every input (and of every input's ``.grad`` when the program runs a
backward), and which outputs share storage with which inputs. Under an autofunc strategy it
also checks that no graph the compile produced holds PyTorch's built-in
``auto_functionalized`` / ``auto_functionalized_v2``.

Strategies: ``autofunc_v1`` / ``autofunc_v2`` (the program's ops registered with autofunc) and
``builtin_v1`` / ``builtin_v2`` (not registered; ``torch._inductor.config.
enable_auto_functionalized_v2`` picks PyTorch's HOP), the baseline the suite compares with.

Backends: ``aot_eager`` (:func:`autofunc.testing.compile_capture`, which runs autofunc's pass
on the captured graph under autofunc strategies), ``inductor`` (the post-grad graph is recorded
by a ``post_grad_custom_pre_pass``, before either re-inplace pass runs) and ``export``
(``torch.export.export(...).module()``, then ``run_decompositions().module()``) and
``export_compile`` (``torch.compile`` of ``run_decompositions().module()``, whose graph already
holds the HOP, through ``compile_capture``: the second path).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch._inductor.config as inductor_config
from torch import fx

import autofunc
from autofunc.testing import compile_capture, output_aliasing, same_result

from ..report_copies import check_report_copies, program_copies

__all__ = ["BACKENDS", "STRATEGIES", "Program", "builtin_hops", "run_cell"]

STRATEGIES = ("autofunc_v1", "autofunc_v2", "builtin_v1", "builtin_v2")
BACKENDS = ("aot_eager", "inductor", "export", "export_compile")


@dataclasses.dataclass(frozen=True)
class Program:
    """One transcribed upstream program.

    ``make_inputs(i)`` returns the inputs of call ``i``; two calls with the same ``i`` return
    equal, independent tensors (aliasing between the inputs included), so eager and the
    compiled function each get their own copy.
    """

    name: str
    suite: str
    source: str  # the upstream test it transcribes
    fn: Callable
    make_inputs: Callable[[int], tuple]
    ops: tuple[str, ...]
    calls: int = 2
    dynamic: bool | None = False
    dynamo_config: tuple[tuple[str, Any], ...] = ()
    inference_mode: bool = False
    backward: bool = False  # sum the outputs that require grad, backward, compare .grad
    compiled_autograd: bool = False  # run that backward under compiled autograd
    atol: float = 1e-5
    # the backends it runs on: torch.export refuses some programs whatever handles their ops
    # (aliased graph inputs, a mutated module-level tensor), PyTorch's built-in included
    backends: tuple[str, ...] = BACKENDS


# -- strategies ---------------------------------------------------------------------------------


@contextlib.contextmanager
def strategy_context(program: Program, strategy: str):
    """Route ``program``'s ops to ``strategy`` for the duration of the block."""
    kind, version = strategy.split("_")
    if kind == "builtin":
        with inductor_config.patch(enable_auto_functionalized_v2=(version == "v2")):
            yield
        return
    regs = []
    try:
        for op in program.ops:
            regs.append(autofunc.register(op, strategy=version))
        yield
    finally:
        for r in regs:
            r.remove()


# -- graph inspection ---------------------------------------------------------------------------


def _builtin_targets() -> tuple:
    hop = torch.ops.higher_order
    return (hop.auto_functionalized, hop.auto_functionalized_v2)


def builtin_hops(gm: fx.GraphModule) -> list[str]:
    """Names of the built-in auto_functionalized* nodes in ``gm`` and its submodules."""
    targets = _builtin_targets()
    found = []
    for mod in gm.modules():
        if isinstance(mod, fx.GraphModule):
            for n in mod.graph.nodes:
                if n.op == "call_function" and n.target in targets:
                    found.append(n.target.name())
    return found


# -- running ------------------------------------------------------------------------------------


def _requires_grad_leaves(inputs: Any) -> list[torch.Tensor]:
    return [
        t
        for t in torch.utils._pytree.tree_leaves(inputs)
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf
    ]


def _call(program: Program, fn: Callable, inputs: tuple, backward_ctx: Callable) -> Any:
    """Run ``fn(*inputs)`` (and the backward, when the program has one); returns what to
    compare: the outputs, the inputs after the call, and the leaves' gradients."""
    mode = torch.inference_mode() if program.inference_mode else contextlib.nullcontext()
    with mode:
        out = fn(*inputs)
    grads: list = []
    if program.backward:
        outs = [
            t
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad
        ]
        loss = sum(t.sum() for t in outs)
        with backward_ctx():
            loss.backward()
        grads = [t.grad for t in _requires_grad_leaves(inputs)]
    return out, inputs, grads, output_aliasing(out, inputs)


def _assert_same(program: Program, what: str, expected: Any, got: Any, call: int) -> None:
    detached = torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.detach(), (expected, got)
    )
    if not same_result(*detached, atol=program.atol, rtol=program.atol):
        raise AssertionError(
            f"{program.name}: call {call}: {what} differ from eager\n"
            f"eager:    {detached[0]!r}\ncompiled: {detached[1]!r}"
        )


def _check_calls(
    program: Program,
    compiled: Callable,
    backward_ctx: Callable,
    aliasing: bool = True,
    calls: range | None = None,
) -> None:
    """``aliasing=False`` for an exported module, whose outputs never alias its inputs."""
    whats = ("outputs", "final inputs", "input grads", "output/input aliasing")[: 3 + aliasing]
    for i in calls or range(program.calls):
        expected = _call(program, program.fn, program.make_inputs(i), contextlib.nullcontext)
        got = _call(program, compiled, program.make_inputs(i), backward_ctx)
        for what, e, g in zip(whats, expected, got):
            _assert_same(program, what, e, g, i)


def _compiled_autograd(program: Program, backend: Any) -> Callable:
    if not program.compiled_autograd:
        return contextlib.nullcontext
    from torch._dynamo import compiled_autograd

    def ctx():
        return compiled_autograd._enable(torch.compile(backend=backend, fullgraph=True))

    return ctx


def _run_aot_eager(program: Program, strategy: str) -> list[str]:
    own: list[set[str]] = []  # per graph, the program's own copies (tools/report_copies.py)
    fn, captured = compile_capture(
        program.fn,
        reinplace_pass=strategy.startswith("autofunc"),
        dynamic=program.dynamic,
        before_pass=lambda gm: own.append(program_copies(gm)),
    )
    backend = _capture_backend(captured)
    _check_calls(program, fn, _compiled_autograd(program, backend))
    if strategy.startswith("autofunc"):
        check_report_copies(captured, own)  # the report counts every copy of each graph
    return [h for gm in captured.modules for h in builtin_hops(gm)]


def _capture_backend(captured: Any) -> Callable:
    """A Dynamo backend for the compiled-autograd graph that records its AOT graphs into
    ``captured`` too (the program's own function is compiled by ``compile_capture``)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def record(gm: fx.GraphModule, example_inputs: Any) -> Any:
        captured.modules.append(gm)
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=record, keep_inference_input_mutations=True)


def _run_inductor(program: Program, strategy: str) -> list[str]:
    seen: list[str] = []

    def record(graph: fx.Graph) -> None:
        seen.extend(builtin_hops(graph.owning_module))

    with inductor_config.patch(post_grad_custom_pre_pass=record):
        fn = torch.compile(program.fn, backend="inductor", dynamic=program.dynamic, fullgraph=True)
        _check_calls(program, fn, _compiled_autograd(program, "inductor"))
    return seen


class _AsModule(torch.nn.Module):
    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _dynamic_shapes(program: Program, args: tuple) -> Any:
    """Every dimension ``Dim.AUTO`` for a program compiled with ``dynamic=True`` (its calls
    may change shapes), else static."""
    if not program.dynamic:
        return None
    auto = torch.export.Dim.AUTO
    spec = torch.utils._pytree.tree_map(
        lambda a: {d: auto for d in range(a.dim())} if isinstance(a, torch.Tensor) else None,
        args,
    )
    return (spec,)  # _AsModule.forward takes *args: one entry, the whole tuple


def _exports(program: Program):
    """``(calls, mode, exported program)`` per export: once, or once per call for a ``dynamic``
    program (whose calls change shapes, as a recompiling ``torch.compile`` would follow).
    Export captures inference graphs, so only the forward is compared (no backward, no
    ``.grad``): the yielded calls belong to ``program`` with those turned off."""
    program = dataclasses.replace(program, backward=False, compiled_autograd=False)
    mode = torch.inference_mode() if program.inference_mode else contextlib.nullcontext()
    groups = [range(i, i + 1) for i in range(program.calls)] if program.dynamic else [None]
    for calls in groups:
        args = program.make_inputs(calls[0] if calls else 0)
        with mode:
            ep = torch.export.export(
                _AsModule(program.fn), args, dynamic_shapes=_dynamic_shapes(program, args)
            )
        yield program, calls, mode, ep


def _run_export(program: Program, strategy: str) -> list[str]:
    """Each export runs as ``.module()``, then after ``run_decompositions()``."""
    seen: list[str] = []
    for fwd, calls, mode, ep in _exports(program):
        _check_calls(fwd, ep.module(), contextlib.nullcontext, aliasing=False, calls=calls)
        with mode:
            decomposed = ep.run_decompositions()
        seen += builtin_hops(decomposed.graph_module)
        _check_calls(fwd, decomposed.module(), contextlib.nullcontext, aliasing=False, calls=calls)
    return seen


def _run_export_compile(program: Program, strategy: str) -> list[str]:
    """``torch.compile`` of each decomposed export's module (the second path)."""
    seen: list[str] = []
    for fwd, calls, mode, ep in _exports(program):
        with mode:
            ep = ep.run_decompositions()
        fn, captured = compile_capture(
            ep.module(), reinplace_pass=strategy.startswith("autofunc"), dynamic=fwd.dynamic
        )
        _check_calls(fwd, fn, contextlib.nullcontext, aliasing=False, calls=calls)
        seen += [h for gm in captured.modules for h in builtin_hops(gm)]
    return seen


_RUNNERS = {
    "aot_eager": _run_aot_eager,
    "inductor": _run_inductor,
    "export": _run_export,
    "export_compile": _run_export_compile,
}


def run_cell(program: Program, strategy: str, backend: str) -> list[str]:
    """Run one cell; raises on any difference from eager (or compile error).

    Returns the built-in HOP nodes seen in the captured graphs; under an autofunc strategy
    seeing one is itself a failure (``AssertionError``).
    """
    torch._dynamo.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._dynamo.config.patch(dict(program.dynamo_config)))
        stack.enter_context(strategy_context(program, strategy))
        try:
            seen = _RUNNERS[backend](program, strategy)
        finally:
            torch._dynamo.reset()
    if strategy.startswith("autofunc") and seen:
        raise AssertionError(f"{program.name}: built-in HOP in an autofunc graph: {seen}")
    return seen

"""``explain()``: compile a function and report, per mutable buffer, whether it was written in
place or cloned, why, and how many bytes that cost.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable

import torch

from . import registry
from .errors import AutofuncError
from .passes.report import Report

__all__ = ["explain"]


def explain(
    fn: Callable,
    *args: Any,
    strategy: str | None = None,
    backend: str = "inductor",
    ops: Iterable[Any] = (),
    dynamic: bool | None = False,
    **kwargs: Any,
) -> Report:
    """Compile ``fn`` (a fresh compile, caches bypassed), run it once on ``args`` and return the
    re-inplace reports of all its graphs, merged into one printable :class:`Report`.

    The registrations, Dynamo's compiled code of ``fn`` and the user's handles are left as they
    were: the compile uses a backend object of its own (Dynamo keeps compiled code per backend,
    so nothing the user compiled is reused or dropped) and the strategy override is undone on
    return (``autofunc.override``).

    Args:
        fn: the function (or module) to compile.
        *args, **kwargs: its inputs. Mutated inputs are mutated, as by ``fn`` itself.
        strategy: ``"v1"``/``"v2"`` to use that strategy for the duration of the call: for
            ``ops`` if given, else for every op already registered. ``None`` keeps the
            registrations as they are.
        backend: ``"inductor"`` (the pass runs as Inductor's post-grad pass) or ``"aot_eager"``
            (the pass runs on AOTAutograd's graphs, no code generation).
        ops: ops to register for the duration of the call.
        dynamic: passed to ``torch.compile``.
    """
    if backend not in ("inductor", "aot_eager"):
        raise AutofuncError(f"explain: backend must be 'inductor' or 'aot_eager', got {backend!r}")
    with _strategy_override(strategy, ops):
        if backend == "inductor":
            report = _explain_inductor(fn, args, kwargs, dynamic)
        else:
            report = _explain_aot(fn, args, kwargs, dynamic)
    report.graph = getattr(fn, "__qualname__", type(fn).__name__)
    return report


def _explain_inductor(fn: Callable, args: tuple, kwargs: dict, dynamic: bool | None) -> Report:
    # first: Note [Importing the compiler beside a first compile]
    from .backends.inductor.glue import collect_reports, install_pass

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from torch._inductor.compile_fx import compile_fx

    install_pass()

    def explain_backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        return compile_fx(gm, example_inputs)

    with (
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
        collect_reports() as reports,
    ):
        torch.compile(fn, backend=explain_backend, dynamic=dynamic)(*args, **kwargs)
    report = Report()
    for r in reports:
        report.extend(r)
    return report


def _explain_aot(fn: Callable, args: tuple, kwargs: dict, dynamic: bool | None) -> Report:
    from .testing import compile_capture

    compiled, captured = compile_capture(fn, dynamic=dynamic, fullgraph=False)
    compiled(*args, **kwargs)
    return captured.report


def _strategy_override(strategy: str | None, ops: Iterable[Any]):
    ops = list(ops)
    if strategy is None and not ops:
        return contextlib.nullcontext()
    if strategy is None:  # ops given without a strategy are registered with v2 for the call
        strategy = "v2"
    return registry.override(strategy, ops)

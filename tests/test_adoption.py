"""Swapping autofunc in for PyTorch's built-in must not lose programs:
``-> None`` schemas, argument identity, compiles in other threads, registrations made or
changed after a compile, and ``explain`` leaving the user's registrations and caches alone."""

import threading
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)

import autofunc
from autofunc.testing import same_result

_BUILTIN = (auto_functionalized, auto_functionalized_v2)
_OURS = (autofunc.auto_functionalized_v1, autofunc.auto_functionalized_v2)


@pytest.fixture
def lib():
    lib = torch.library.Library("af_adopt", "FRAGMENT")
    yield lib
    lib._destroy()


def _define_none_op(lib):
    # The schema returns NoneType (``-> None``), not ``()``.
    lib.define("axpy_none(Tensor x, Tensor(a!) out) -> None")

    def impl(x, out):
        out.add_(x * 2)

    lib.impl("axpy_none", impl, "CompositeExplicitAutograd")
    return torch.ops.af_adopt.axpy_none.default


@torch.library.custom_op("af_adopt2::axpy", mutates_args={"out"})
def _axpy(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x * 2)


class _Recorder:
    """An aot_eager-style backend that records each forward graph's HOP targets."""

    def __init__(self):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        self.graphs = []  # the call targets of each compiled graph
        self.ran = []  # the index of the graph each call ran

        def record(gm, example_inputs):
            index = len(self.graphs)
            self.graphs.append({n.target for n in gm.graph.nodes if n.op == "call_function"})

            def run(*args):
                self.ran.append(index)
                return gm(*args)

            return make_boxed_func(run)

        self.backend = aot_autograd(fw_compiler=record, inference_compiler=record)

    def last_uses(self, hops) -> bool:
        """Whether the graph that ran last calls one of ``hops``."""
        return any(h in self.graphs[self.ran[-1]] for h in hops)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_none_returning_schema(lib, strategy, backend):
    # "-> None" is legal and common; it used to be rejected at register().
    op = _define_none_op(lib)
    with autofunc.register(op, strategy=strategy):

        def f(x, out):
            op(x, out[1:])
            return out.sum()

        x, out = torch.randn(3), torch.randn(4)
        ex, eo = x.clone(), out.clone()
        expected = f(ex, eo)
        got = torch.compile(f, backend=backend)(x, out)
        assert same_result(got, expected) and same_result(out, eo)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_none_returning_schema_under_export(lib, strategy):
    op = _define_none_op(lib)

    class M(torch.nn.Module):
        def forward(self, x, out):
            op(x, out)
            return out + 1

    with autofunc.register(op, strategy=strategy):
        x, out = torch.randn(3), torch.randn(3)
        ep = torch.export.export(M(), (x, out.clone()))
        eo = out.clone()
        expected = M()(x, eo)
        got = ep.module()(x, out)
        assert same_result(got, expected) and same_result(out, eo)
        assert not any(n.target in _BUILTIN for n in ep.graph.nodes)


def test_inductor_compiles_in_another_thread():
    # Inductor's config is per thread in torch 2.13; a server compiles off the thread
    # that called register().
    op = _axpy._opoverload
    with autofunc.register(op, strategy="v2"):

        def f(x, out):
            op(x, out)
            return out * 3

        x, out = torch.randn(5), torch.randn(5)
        eo = out.clone()
        expected = f(x, eo)
        result = {}

        def work():
            try:
                result["got"] = torch.compile(f, backend="inductor")(x, out)
            except Exception as e:  # noqa: BLE001 - surfaced below
                result["error"] = e

        t = threading.Thread(target=work)
        t.start()
        t.join()
        assert "error" not in result, result.get("error")
        assert same_result(result["got"], expected) and same_result(out, eo)


def test_register_after_compile_recompiles():
    # A function compiled while the op was PyTorch's must pick up a later register()
    # (and every later change of strategy, and remove()) on its next call.
    op = _axpy._opoverload
    rec = _Recorder()

    def f(x, out):
        op(x, out)
        return out + 1

    compiled = torch.compile(f, backend=rec.backend)
    x = torch.randn(4)
    compiled(x, torch.zeros(4))
    assert rec.last_uses(_BUILTIN) and not rec.last_uses(_OURS)

    handle = autofunc.register(op, strategy="v1")
    out = torch.zeros(4)
    assert same_result(compiled(x, out), x * 2 + 1) and same_result(out, x * 2)
    assert len(rec.graphs) == 2 and rec.last_uses([autofunc.auto_functionalized_v1])

    autofunc.register(op, strategy="v2")
    compiled(x, torch.zeros(4))
    assert len(rec.graphs) == 3 and rec.last_uses([autofunc.auto_functionalized_v2])

    handle2 = autofunc.register(op, strategy="v2")  # the same registrations: no recompile
    compiled(x, torch.zeros(4))
    assert len(rec.graphs) == 3

    handle2.remove()
    handle.remove()  # replaced by the later registrations: a no-op
    out = torch.zeros(4)
    assert same_result(compiled(x, out), x * 2 + 1) and same_result(out, x * 2)
    assert rec.last_uses(_BUILTIN) and not rec.last_uses(_OURS)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_one_registrations_guard_however_many_calls(strategy, monkeypatch):
    # Note [One registrations guard per frame]: six calls of the op in one frame must install
    # one guard on the registrations, evaluated once per call of the compiled code (before the
    # fix: one per op call, so a 128-layer model evaluated 512 of them on every step).
    evaluations = 0
    real = autofunc.registry.state_token

    def counting_token():
        nonlocal evaluations
        evaluations += 1
        return real()

    monkeypatch.setattr(autofunc.registry.routing, "state_token", counting_token)
    op = _axpy._opoverload

    def f(x, out):
        for i in range(6):
            op(x[i], out[i])
        return out.sum()

    with autofunc.register(op, strategy=strategy):
        compiled = torch.compile(f, backend="aot_eager")
        x, out = torch.randn(6, 3), torch.zeros(6, 3)
        compiled(x, out)
        evaluations = 0
        out2, expected_out = torch.zeros(6, 3), torch.zeros(6, 3)
        got = compiled(x, out2)
        assert evaluations == 1
        assert same_result(got, f(x, expected_out)) and same_result(out2, expected_out)


def _axpy_plus_one(x, out):
    _axpy(x, out)
    return out + 1


def _compiled_under_v2():
    """``_axpy`` registered with v2 and a recorded compile of ``_axpy_plus_one``, called once."""
    rec = _Recorder()
    handle = autofunc.register(_axpy, strategy="v2")
    compiled = torch.compile(_axpy_plus_one, backend=rec.backend)
    x = torch.randn(4)
    compiled(x, torch.zeros(4))
    return rec, handle, compiled, x


def test_override_restores_registrations_and_keeps_compiled_code():
    op = _axpy._opoverload
    rec, handle, compiled, x = _compiled_under_v2()
    with autofunc.override("v1", [op]):
        assert autofunc.registry.registered_strategy(op) == "v1"
        compiled(x, torch.zeros(4))
        assert rec.last_uses([autofunc.auto_functionalized_v1])
    assert autofunc.registry.registrations() == {"af_adopt2::axpy.default": "v2"}
    n = len(rec.graphs)
    compiled(x, torch.zeros(4))
    assert len(rec.graphs) == n  # the entry compiled before the block is valid again
    assert rec.last_uses([autofunc.auto_functionalized_v2])
    handle.remove()
    assert autofunc.registry.registrations() == {}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_explain_leaves_registrations_and_caches(backend):
    # explain(strategy=...) used to take the op over (the user's remove() became a
    # no-op) and reset the whole Dynamo cache.
    rec, handle, compiled, x = _compiled_under_v2()
    report = autofunc.explain(
        _axpy_plus_one, x, torch.zeros(4), strategy="v1", backend=backend
    )
    assert [c.strategy for c in report.calls] == ["v1"]
    assert autofunc.registry.registrations() == {"af_adopt2::axpy.default": "v2"}
    compiled(x, torch.zeros(4))
    assert len(rec.graphs) == 1  # the user's compiled code survived explain
    handle.remove()
    assert autofunc.registry.registrations() == {}


_identity_seen = []


@torch.library.custom_op("af_adopt2::two", mutates_args={"a", "b"})
def _two(a: torch.Tensor, b: torch.Tensor) -> None:
    _identity_seen.append(a is b)
    a.add_(1)
    b.mul_(2)


def _alias_then_x(x):
    # Eager passes op(x.alias(), x) two objects over one storage; regenerated from one base they
    # used to arrive as one object (Note [Arguments keep their identity]), and Inductor passes
    # an aten.alias as the buffer itself (Note [A fresh alias Inductor keeps]).
    _two(torch.ops.aten.alias(x), x)
    return x + 0


def _view_and_its_full_slice(x):
    # Two objects over one view of the input in eager; Inductor passes a reinterpret_tensor
    # of the input for each, two objects with no fresh alias (Note [Views Inductor passes as
    # objects of their own])
    v = x.unsqueeze(0)
    _two(v[:, 0:3], v)
    return x + 0


def _two_views_of_a_value(x):
    # The same for two views of a value the pass pins (fuzz seed 20261916 #231)
    r = x.sum() * 1.5
    _two(r.view(1), r.flatten())
    return r + 0


def _x_twice(x):
    # Eager passes op(x, x) one object twice; it used to arrive as two (the second a fresh
    # alias, an extern kernel under Inductor). v2's wire names it (``_same``).
    _two(x, x)
    return x + 0


@pytest.mark.parametrize("strategy", ["v1", "v2"])
@pytest.mark.parametrize("path", ["hop", "pass", "inductor"])
@pytest.mark.parametrize(
    "f, one_object",
    [
        (_alias_then_x, False),
        (_x_twice, True),
        (_view_and_its_full_slice, False),
        (_two_views_of_a_value, False),
    ],
)
def test_arguments_keep_eagers_identity(strategy, path, f, one_object):
    from autofunc.testing import compile_capture

    with autofunc.register(_two, strategy=strategy):
        _identity_seen.clear()
        e = torch.ones(3)
        expected = f(e)
        if path == "inductor":
            compiled = torch.compile(f, backend="inductor")
        else:
            compiled, _ = compile_capture(f, reinplace_pass=path == "pass")
        x = torch.ones(3)
        got = compiled(x)
        assert same_result(got, expected) and same_result(x, e)
        assert _identity_seen == [one_object, one_object]


def test_reports_are_collected_per_block_and_bounded():
    # Reports used to accumulate for the life of the process.
    from autofunc import inductor, reports

    def f(x, out):
        _axpy(x, out)
        return out + 1

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with (
        autofunc.register(_axpy, strategy="v2"),
        # A cache hit skips the post-grad passes, and with them the report.
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
    ):
        with inductor.collect_reports() as outer:
            with inductor.collect_reports() as inner:
                torch.compile(f, backend="inductor")(torch.randn(4), torch.zeros(4))
        torch._dynamo.reset()
        torch.compile(f, backend="inductor", dynamic=True)(torch.randn(5), torch.zeros(5))
    assert len(inner) == 1 and len(outer) == 1 and not reports._reports.blocks
    assert [c.op for c in outer[0].calls] == ["af_adopt2::axpy.default"]
    assert reports._reports.recent.maxlen is not None


def test_registry_imports_no_backend():
    # The registry is pure; the Inductor glue depends on it, not the reverse.
    import ast
    import importlib
    import inspect
    import pkgutil

    from autofunc import registry

    modules = [registry] + [
        importlib.import_module(m.name)
        for m in pkgutil.iter_modules(registry.__path__, registry.__name__ + ".")
    ]
    assert len(modules) > 1
    imported = {
        (node.module or "") + ":" + ",".join(a.name for a in node.names)
        for module in modules
        for node in ast.walk(ast.parse(inspect.getsource(module)))
        if isinstance(node, ast.ImportFrom)
    }
    assert not [m for m in imported if "inductor" in m or "explain" in m], imported


def test_import_loads_neither_dynamo_nor_inductor():
    # Note [Inductor imported when first needed]: `import autofunc` costs well under a second
    # above torch (no Dynamo, Inductor or sympy); the first registration sets up the Inductor
    # pass and the HOPs' allowance.
    import subprocess
    import sys

    program = (
        "import sys, torch, autofunc\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch._inductor.config',"
        " 'autofunc.backends.inductor.glue',"
        " 'sympy', 'torch.fx.experimental.symbolic_shapes') if m in sys.modules))\n"
        "from tools import corpus\n"
        "autofunc.register(corpus.add_)\n"
        "import torch._inductor.config as c\n"
        "print(type(c.post_grad_custom_post_pass).__name__,"
        " 'autofunc.backends.inductor.glue' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]  # where ``tools`` imports from
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=root
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, second = out.stdout.strip().splitlines()[-2:]
    assert first == "[]"
    assert second == "ReinplacePass True"


def test_the_pass_goes_with_the_last_registration():
    # The user's own post-grad pass is what Inductor runs again once nothing is registered.
    import torch._inductor.config as inductor_config

    from autofunc.inductor import ReinplacePass
    from tools import corpus

    def users_pass(graph):
        pass

    with inductor_config.patch(post_grad_custom_post_pass=users_pass):
        first = autofunc.register(corpus.add_)
        second = autofunc.register(corpus.add_list)
        installed = inductor_config.post_grad_custom_post_pass
        assert isinstance(installed, ReinplacePass) and installed.then is users_pass
        first.remove()
        assert isinstance(inductor_config.post_grad_custom_post_pass, ReinplacePass)
        second.remove()
        assert inductor_config.post_grad_custom_post_pass is users_pass
        autofunc.reinplace_triton_kernels(True)  # the Triton switch keeps it
        autofunc.register(corpus.add_).remove()
        assert isinstance(inductor_config.post_grad_custom_post_pass, ReinplacePass)
        autofunc.reinplace_triton_kernels(False)
        assert inductor_config.post_grad_custom_post_pass is users_pass

"""Tests for autofunc.register / functionalize: accepted op forms, re-registration, removal,
the decorator, and the Inductor pass installation."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx
from torch.torch_version import TorchVersion

import autofunc
from autofunc import inductor as af_inductor
from autofunc.registry import registered_strategy
from autofunc.testing import compile_capture, run_against_eager, same_result
from tools import corpus

OLD_TORCH = TorchVersion(torch.__version__) < "2.12"  # as tests/conftest.py's

_AUTOFUNC_HOPS = {"v1": autofunc.auto_functionalized_v1, "v2": autofunc.auto_functionalized_v2}
_PYTORCH_HOPS = (auto_functionalized, auto_functionalized_v2)
_counter = itertools.count()


def _hop_calls(fn, *inputs) -> list[tuple[str, str | None]]:
    """Compiles ``fn`` (functional graph, no pass), checks it against eager, and returns
    ``(hop name, op name)`` for every HOP call in the graph."""
    compiled, captured = compile_capture(fn, reinplace_pass=False)
    assert run_against_eager(fn, compiled, inputs).correct
    calls = []
    for n in captured.modules[0].graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator):
            op = n.args[0]
            calls.append((n.target.name(), op if isinstance(op, str) else str(op)))
    return calls


def _note_select_calls():
    return _hop_calls(corpus.note_select, torch.randn(3, 3))


def _overloads_calls():
    return _hop_calls(corpus.overloads, torch.randn(3, 4))


_ADD = "autofunc_corpus::add_.default"
_BUMP = ("autofunc_corpus::bump.default", "autofunc_corpus::bump.by")


# -- accepted forms ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        lambda: corpus.add_,  # CustomOpDef
        lambda: torch.ops.autofunc_corpus.add_.default,  # OpOverload
        lambda: torch.ops.autofunc_corpus.add_,  # OpOverloadPacket
        lambda: "autofunc_corpus::add_",
        lambda: "autofunc_corpus::add_.default",
    ],
    ids=["custom_op_def", "op_overload", "op_overload_packet", "name", "name_overload"],
)
@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_register_accepts_every_op_form(form, strategy):
    reg = autofunc.register(form(), strategy=strategy)
    try:
        assert reg.ops == (_ADD,) and reg.strategy == strategy
        assert registered_strategy(_ADD) == strategy
        assert _note_select_calls() == [(f"autofunc_{strategy}", _ADD)]
    finally:
        reg.remove()
    assert registered_strategy(_ADD) is None


@pytest.mark.parametrize(
    "form",
    [lambda: torch.ops.autofunc_corpus.bump, lambda: "autofunc_corpus::bump"],
    ids=["packet", "name"],
)
def test_packet_registers_all_overloads(form):
    with autofunc.register(form(), strategy="v1") as reg:
        assert sorted(reg.ops) == sorted(_BUMP)
        assert _overloads_calls() == [("autofunc_v1", _BUMP[0]), ("autofunc_v1", _BUMP[1])]


def test_named_overload_registers_only_that_overload():
    with autofunc.register("autofunc_corpus::bump.by", strategy="v2") as reg:
        assert reg.ops == ("autofunc_corpus::bump.by",)
        (default_hop, default_op), (by_hop, by_op) = _overloads_calls()
    # bump.default stays with PyTorch's own HOP.
    assert default_hop in {h.name() for h in _PYTORCH_HOPS}
    assert default_op == "autofunc_corpus.bump.default"
    assert (by_hop, by_op) == ("autofunc_v2", _BUMP[1])


# -- re-registration and removal -----------------------------------------------------------------


def test_registering_again_replaces_the_strategy():
    first = autofunc.register(corpus.add_, strategy="v1")
    second = None
    try:
        assert _note_select_calls() == [("autofunc_v1", _ADD)]
        torch._dynamo.reset()
        second = autofunc.register(corpus.add_, strategy="v2")
        assert _note_select_calls() == [("autofunc_v2", _ADD)]
        # The replaced handle no longer owns the op: removing it changes nothing.
        first.remove()
        assert registered_strategy(_ADD) == "v2"
        torch._dynamo.reset()
        assert _note_select_calls() == [("autofunc_v2", _ADD)]
    finally:
        first.remove()
        if second is not None:
            second.remove()
    assert registered_strategy(_ADD) is None


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_remove_restores_pytorch_default(strategy):
    reg = autofunc.register(corpus.add_, strategy=strategy)
    assert _note_select_calls() == [(f"autofunc_{strategy}", _ADD)]
    reg.remove()
    torch._dynamo.reset()
    ((hop, op),) = _note_select_calls()
    assert hop in {h.name() for h in _PYTORCH_HOPS}
    assert "autofunc_corpus.add_.default" in op


def test_registration_is_a_context_manager():
    with autofunc.register(corpus.add_, strategy="v1"):
        assert _note_select_calls() == [("autofunc_v1", _ADD)]
    torch._dynamo.reset()
    ((hop, _),) = _note_select_calls()
    assert not hop.startswith("autofunc_")


def test_remove_twice_is_harmless():
    reg = autofunc.register(corpus.add_, strategy="v2")
    reg.remove()
    reg.remove()
    assert registered_strategy(_ADD) is None


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_register_routes_torch_func_functionalize(strategy):
    # C++ functionalization (torch.func.functionalize) goes through the op's Functionalize
    # kernel, which register() installs next to the FunctionalTensorMode rule.
    def fn(x, y):
        buf = x.clone()
        corpus.add_(buf[1], y)
        return buf

    x, y = torch.randn(3, 4), torch.randn(4)
    with autofunc.register(corpus.add_, strategy=strategy):
        if _cpp_functionalize_fails_inside_torch(fn, x, y):
            return
        gm = make_fx(torch.func.functionalize(fn))(x, y)
        torch.testing.assert_close(torch.func.functionalize(fn)(x, y), fn(x, y))
    hops = [n.target for n in gm.graph.nodes if n.target in _AUTOFUNC_HOPS.values()]
    assert hops == [_AUTOFUNC_HOPS[strategy]]
    x_before = x.clone()
    torch.testing.assert_close(gm(x, y), fn(x_before, y))
    assert torch.equal(x, x_before)


_ADD_AND_SUM = "autofunc_corpus::add_and_sum.default"


def _cpp_functionalize_fails_inside_torch(fn, *args) -> bool:
    """On torch < 2.12 tracing C++ functionalization of a registered op trips an internal
    assert of PyTorch (seen on torch 2.11): autofunc turns it into an AutofuncError naming the
    op. Checks that, and says whether the rest of the test can run."""
    if not OLD_TORCH:
        return False
    with pytest.raises(autofunc.AutofuncError, match="C\\+\\+ functionalization"):
        make_fx(torch.func.functionalize(fn))(*args)
    return True


def _has_functionalize_kernel(name: str) -> bool:
    name = name.removesuffix(".default")
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, "Functionalize")


def test_op_returning_tensors_gets_no_functionalize_kernel_by_default():
    # Note [The Functionalize kernel and Inductor]: with the kernel, Inductor treats the op's
    # output as an alias of its mutable input and never reuses the output's buffer.
    def fn(x, y):
        buf = x.clone()
        s = corpus.add_and_sum(buf[1], y)
        return buf, s * 2

    assert not _has_functionalize_kernel(_ADD_AND_SUM)
    with autofunc.register(corpus.add_and_sum, strategy="v2"):
        assert not _has_functionalize_kernel(_ADD_AND_SUM)
        with autofunc.override("v1"):  # override keeps the choice
            assert not _has_functionalize_kernel(_ADD_AND_SUM)
        x, y = torch.randn(3, 4), torch.randn(4)
        # Inductor reuses the op's output buffer for ``s * 2``, as under PyTorch's built-in.
        code = "\n".join(run_and_get_code(torch.compile(fn), x, y)[1])
        assert "# reuse" in code
    with autofunc.register(corpus.add_, strategy="v2"):  # returns nothing: gets the kernel
        assert _has_functionalize_kernel(_ADD)
    assert not _has_functionalize_kernel(_ADD)


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_cpp_functionalize_of_an_op_returning_tensors_on_request(strategy):
    def fn(x, y):
        buf = x.clone()
        s = corpus.add_and_sum(buf[1], y)
        return buf, s

    x, y = torch.randn(3, 4), torch.randn(4)
    reg = autofunc.register(corpus.add_and_sum, strategy=strategy, cpp_functionalize=True)
    with reg:
        assert _has_functionalize_kernel(_ADD_AND_SUM)
        if _cpp_functionalize_fails_inside_torch(fn, x, y):
            return
        gm = make_fx(torch.func.functionalize(fn))(x, y)
        assert same_result(torch.func.functionalize(fn)(x, y), fn(x, y))
        # Registering again without asking drops the kernel.
        autofunc.register(corpus.add_and_sum, strategy=strategy).remove()
        assert not _has_functionalize_kernel(_ADD_AND_SUM)
    hops = [n.target for n in gm.graph.nodes if n.target in _AUTOFUNC_HOPS.values()]
    assert hops == [_AUTOFUNC_HOPS[strategy]]
    assert same_result(gm(x, y), fn(x, y))


# -- the registry's state -----------------------------------------------------------------------


def test_snapshot_and_restore_put_the_registrations_back():
    state = autofunc.registry.routing.registry_state
    first = autofunc.register(corpus.add_, strategy="v1")
    try:
        saved = state.snapshot()
        assert hash(saved) == hash(state.snapshot())  # an immutable value
        second = autofunc.register(corpus.add_, strategy="v2")  # takes the op over
        other = autofunc.register(corpus.two, strategy="v2")
        state.restore(saved)
        other.remove()  # was not in the snapshot, so the restore left it alone
        assert registered_strategy(_ADD) == "v1"
        assert autofunc.registry.state_token() == saved.strategies == ((_ADD, "v1"),)
        second.remove()  # no longer the owner: a no-op
        assert registered_strategy(_ADD) == "v1"
        state.check()
    finally:
        first.remove()
    assert autofunc.registry.registrations() == {}
    state.check()


def test_override_restores_the_functionalize_kernel_exactly():
    # An op that returns nothing, registered without its Functionalize kernel: override gives it
    # the kernel for the block (the default for such an op) and must take it away again.
    with autofunc.register(corpus.add_, strategy="v2", cpp_functionalize=False) as handle:
        assert not _has_functionalize_kernel(_ADD)
        with autofunc.override("v1"):
            assert _has_functionalize_kernel(_ADD)
            autofunc.registry.routing.registry_state.check(outside_override=False)
        assert not _has_functionalize_kernel(_ADD)
        assert registered_strategy(_ADD) == "v2"
        autofunc.registry.routing.registry_state.check()
    # Removed inside the block (which destroys its kernel): the block's end brings both back,
    # and the handle owns the op again.
    handle = autofunc.register(corpus.add_, strategy="v2")
    with autofunc.override("v1", [corpus.add_]):
        handle.remove()
        assert registered_strategy(_ADD) is None and not _has_functionalize_kernel(_ADD)
    assert registered_strategy(_ADD) == "v2" and _has_functionalize_kernel(_ADD)
    handle.remove()
    assert autofunc.registry.registrations() == {} and not _has_functionalize_kernel(_ADD)


# -- the decorator -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_functionalize_decorator_on_custom_op(strategy):
    ns = f"aftest_registry{next(_counter)}"

    @autofunc.functionalize(strategy=strategy)
    @torch.library.custom_op(f"{ns}::scale_", mutates_args={"x"})
    def scale_(x: torch.Tensor, s: float) -> None:
        x.mul_(s)

    try:
        assert isinstance(scale_, torch._library.custom_ops.CustomOpDef)
        assert scale_.autofunc_registration.ops == (f"{ns}::scale_.default",)
        assert registered_strategy(f"{ns}::scale_.default") == strategy

        def fn(x):
            buf = x + 1
            scale_(buf[:, 1], 3.0)
            return buf

        assert _hop_calls(fn, torch.randn(3, 4)) == [
            (f"autofunc_{strategy}", f"{ns}::scale_.default")
        ]
    finally:
        scale_.autofunc_registration.remove()


def test_functionalize_decorator_without_arguments():
    ns = f"aftest_registry{next(_counter)}"

    @autofunc.functionalize
    @torch.library.custom_op(f"{ns}::neg_", mutates_args={"x"})
    def neg_(x: torch.Tensor) -> None:
        x.neg_()

    with neg_.autofunc_registration as reg:
        assert reg.strategy == "v2"
        x = torch.randn(4)
        assert _hop_calls(lambda t: neg_(t), x) == [("autofunc_v2", f"{ns}::neg_.default")]


# -- Inductor pass installation -----------------------------------------------------------------


class _UserPass(CustomGraphPass):
    """Records what it saw: whether autofunc's HOPs were already gone and the op called directly."""

    def __init__(self):
        self.calls = 0
        self.saw_hops = False
        self.saw_direct_call = False

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        for n in graph.nodes:
            if n.op != "call_function":
                continue
            self.saw_hops |= n.target in _AUTOFUNC_HOPS.values()
            self.saw_direct_call |= n.target is torch.ops.autofunc_corpus.add_.default

    def uuid(self):
        return f"autofunc-test-user-pass-{id(self)}"


def test_register_chains_the_users_post_grad_pass():
    user = _UserPass()
    af_inductor.last_reports(clear=True)
    # config.patch restores the user's (and autofunc's) setting when the test ends.
    with inductor_config.patch(post_grad_custom_post_pass=user, fx_graph_cache=False):
        with autofunc.register(corpus.add_, strategy="v2"):
            installed = inductor_config.post_grad_custom_post_pass
            assert isinstance(installed, af_inductor.ReinplacePass)
            assert installed.then is user
            # Idempotent: a second registration does not wrap autofunc's pass again.
            autofunc.register(corpus.two, strategy="v2").remove()
            assert inductor_config.post_grad_custom_post_pass is installed

            x = torch.randn(3, 3)
            got = torch.compile(corpus.note_select, backend="inductor", fullgraph=True)(x)
            torch.testing.assert_close(got, corpus.note_select(x))
    assert user.calls == 1
    # autofunc's pass ran first: the user's pass saw the direct op call, not the HOP.
    assert user.saw_direct_call and not user.saw_hops
    (report,) = af_inductor.last_reports(clear=True)
    assert [c.op for c in report.calls] == [_ADD]


def test_install_pass_keeps_a_user_pass_set_after_registration():
    user = _UserPass()
    with inductor_config.patch(post_grad_custom_post_pass=None):
        with autofunc.register(corpus.add_, strategy="v1"):
            assert isinstance(inductor_config.post_grad_custom_post_pass, af_inductor.ReinplacePass)
            # The user replaces it; the next registration puts autofunc's pass back in front.
            inductor_config.post_grad_custom_post_pass = user
            with autofunc.register(corpus.two, strategy="v1"):
                installed = inductor_config.post_grad_custom_post_pass
                assert isinstance(installed, af_inductor.ReinplacePass)
                assert installed.then is user


# -- HOP names -----------------------------------------------------------------------------------


def test_hop_names_are_distinct_from_pytorchs():
    names = {h.name() for h in _AUTOFUNC_HOPS.values()}
    assert names == {"autofunc_v1", "autofunc_v2"}
    assert names.isdisjoint(h.name() for h in _PYTORCH_HOPS)
    assert torch.ops.higher_order.autofunc_v1 is autofunc.auto_functionalized_v1
    assert torch.ops.higher_order.autofunc_v2 is autofunc.auto_functionalized_v2


def _unfold_then_row(x, y):
    buf = x * 1
    corpus.add_(buf.unfold(1, 1, 5), y[:1])  # columns 0 and 5; 1-4 must keep their values
    corpus.add_(buf[1], y)  # a plain row
    return buf


def test_v1_call_through_an_unfold_view_uses_v2():
    # Note [Writing back unfold views]: functionalization's inverse of unfold zeroes what no
    # window covers, so a v1 write-back of an unfold view would be wrong; that call takes v2.
    x, y = torch.randn(4, 6), torch.randn(6)
    with autofunc.register(corpus.add_, strategy="v1"):
        compiled, captured = compile_capture(_unfold_then_row, reinplace_pass=False)
        check = run_against_eager(_unfold_then_row, compiled, (x, y))
    assert check.correct, check.mismatch  # outputs and the final inputs
    (text,) = captured.functional
    hops = [f"autofunc_{s}" for line in text.splitlines() for s in ("v1", "v2")
            if f"autofunc_{s}(" in line]  # fmt: skip
    assert hops == ["autofunc_v2", "autofunc_v1"]


@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_unfold_view_without_a_known_base_is_refused(strategy):
    # Under torch.func.functionalize no base is known: v2 would write the unfold view back
    # through the same inverse, so the call is refused by name instead of computed wrongly.
    x, y = torch.randn(4, 6), torch.randn(6)
    with autofunc.register(corpus.add_, strategy=strategy):
        if _cpp_functionalize_fails_inside_torch(_unfold_then_row, x, y):
            return
        with pytest.raises(autofunc.UnsupportedCallError, match="unfold") as info:
            torch.func.functionalize(_unfold_then_row)(x, y)
    assert info.value.arg == "x" and info.value.op == _ADD
    assert "argument 'x' of op autofunc_corpus::add_.default" in str(info.value)


def test_inexact_slot_names_the_unfold_argument():
    from autofunc.hops.v1 import inexact_slot
    from autofunc.schema import op_info

    info = op_info(torch.ops.autofunc_corpus.add_list_opt.default)
    seen = []

    def probe(x):  # functional tensors carry the views that made them
        plain, unfolded = x[0], x.unfold(1, 2, 3)[1:]
        seen.append(inexact_slot(info, {"xs": [plain, None], "y": x}))
        seen.append(inexact_slot(info, {"xs": [plain, None, unfolded], "y": x}))
        return x

    torch.func.functionalize(probe)(torch.randn(4, 6))
    assert seen == [None, "xs[2]"]


@pytest.mark.skipif(not hasattr(torch.Tag, "inplace"), reason="torch.Tag.inplace: torch 2.12+")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("strategy", ["v1", "v2"])
def test_op_returning_its_argument_returns_a_view_of_the_input(strategy, backend):
    # Note [Ops that return their arguments]: eager returns the row it was given, a view of x;
    # so must the compiled function, holding the new value.
    def fn(x):
        return corpus.scale_(x[1], 3.0)

    x = torch.randn(3, 4)
    expected_x = x.clone()
    expected = fn(expected_x)
    with autofunc.register("autofunc_corpus::scale_", strategy=strategy):
        got = torch.compile(fn, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, expected_x)
    assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert got.storage_offset() == x[1].storage_offset()


@pytest.mark.parametrize(
    "op", [torch.ops.aten.add_.Tensor, torch.ops.aten.add_, "aten::index_put_", "prims::copy_to"]
)
def test_core_ops_are_refused(op):
    # Registering an ATen op would replace its Functionalize kernel for the whole process and
    # make every call of it opaque to Inductor.
    with pytest.raises(autofunc.UnsupportedOpError, match="autofunc is for custom ops") as info:
        autofunc.register(op)
    assert info.value.op.split("::")[0] in ("aten", "prims")
    assert torch.compile(lambda x: x.add_(1), backend="aot_eager")(torch.zeros(2)).eq(1).all()


# -- registrations and compiles in other threads (Note [Registrations wait for compiles]) -------


def test_a_registration_waits_for_a_compile_in_flight():
    import threading

    from torch._dynamo import convert_frame

    ns = f"aftest_registry{next(_counter)}"

    @torch.library.custom_op(f"{ns}::bump_", mutates_args={"x"})
    def bump_(x: torch.Tensor) -> None:
        x.add_(1)

    changed = []
    convert_frame.compile_lock.acquire()  # another thread compiling a frame holds this
    try:
        thread = threading.Thread(target=lambda: changed.append(autofunc.register(bump_)))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive() and not changed  # the registration waits
        assert registered_strategy(bump_._opoverload) is None
    finally:
        convert_frame.compile_lock.release()
    thread.join(30)
    assert changed and registered_strategy(bump_._opoverload) == "v2"
    changed[0].remove()
    assert registered_strategy(bump_._opoverload) is None

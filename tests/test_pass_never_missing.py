"""However ``post_grad_custom_post_pass`` is set, autofunc's HOPs are decided by autofunc's
pass (Note [The pass is never missing] in autofunc/backends/inductor/glue.py).

Each case compiles one small program under Inductor with the entry set another way: in
``torch.compile(options=...)`` and ``compile_fx(config_patches=...)`` (set again around the
inner compile, which undid the pass the functionalization rule installed: lowering failed with
"autofunc_v2 is not an OpOverload"), set to None, patched around the compile, assigned, and a
list. Results and the mutated input are checked against eager, and the report (where the pass
ran) against the expected one.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, CustomInferenceAwareGraphPass

import autofunc
from autofunc.backends.inductor import glue as inductor
from autofunc.inductor import collect_reports


@torch.library.custom_op("never_missing::put_row", mutates_args={"cache"})
def put_row(cache: torch.Tensor, row: torch.Tensor) -> None:
    cache[0].copy_(row)


@put_row.register_fake
def _(cache, row):
    return None


def step(cache: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    put_row(cache[1], x * 2)  # a view of a graph input, written in place by v2
    return cache.sum()


class Seen(CustomGraphPass):
    """A user's (or vLLM's) post-grad pass: records the call targets it saw."""

    def __init__(self, tag: str):
        self.tag, self.targets = tag, []

    def __call__(self, graph):
        self.targets.append([str(n.target) for n in graph.nodes if n.op == "call_function"])

    def uuid(self):
        return f"seen-{self.tag}"


class SeenInference(CustomInferenceAwareGraphPass, Seen):
    def __call__(self, graph, is_inference):
        Seen.__call__(self, graph)


@pytest.fixture
def registered():
    reg = autofunc.register(put_row)
    yield
    reg.remove()


def _compile_and_check(compile_fn, caplog):
    cache, x = torch.zeros(2, 3, 4), torch.randn(4)
    expected_cache = cache.clone()
    expected = step(expected_cache, x)
    with collect_reports() as reports, caplog.at_level(logging.WARNING, "autofunc.inductor"):
        with inductor_config.patch(fx_graph_cache=False):
            out = compile_fn(step)(cache, x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(cache, expected_cache)
    (report,) = reports
    assert report.num_clones == 0 and len(report.calls) == 1, str(report)
    return report


def _undecided(seen: Seen) -> bool:
    return any("autofunc_v2" in targets for targets in seen.targets)


def test_pass_in_torch_compile_options(registered, caplog):
    seen = Seen("options")
    inductor._warned.clear()
    report = _compile_and_check(
        lambda f: torch.compile(f, options={"post_grad_custom_post_pass": seen}), caplog
    )
    assert seen.targets and _undecided(seen)  # theirs ran first, on the HOP
    assert "ran as Inductor's device pass" in report.note and "Seen" in report.note
    assert "did not run as Inductor's post-grad custom pass" in caplog.text


def test_pass_in_compile_fx_config_patches(registered, caplog):
    from torch._inductor.compile_fx import compile_fx

    seen = SeenInference("config_patches")  # vLLM's pass manager is inference-aware

    def backend(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches={"post_grad_custom_post_pass": seen})

    report = _compile_and_check(lambda f: torch.compile(f, backend=backend), caplog)
    assert seen.targets and "ran as Inductor's device pass" in report.note


def test_pass_set_to_none(registered, caplog):
    inductor._warned.clear()
    report = _compile_and_check(
        lambda f: torch.compile(f, options={"post_grad_custom_post_pass": None}), caplog
    )
    assert "post_grad_custom_post_pass is None" in report.note
    assert "post_grad_custom_post_pass is None" in caplog.text


@pytest.mark.parametrize("how", ["patch", "assign", "list"])
def test_pass_chained_with_a_user_pass(how, registered, caplog):
    first, second = Seen(f"{how}-1"), Seen(f"{how}-2")
    value = [first, second] if how == "list" else first
    saved = inductor_config.post_grad_custom_post_pass
    try:
        if how == "patch":
            with inductor_config.patch(post_grad_custom_post_pass=value):
                report = _compile_and_check(torch.compile, caplog)
        else:
            inductor_config.post_grad_custom_post_pass = value
            report = _compile_and_check(torch.compile, caplog)
    finally:
        inductor_config.post_grad_custom_post_pass = saved
    # autofunc's pass ran in the post-pass slot, first: the user's passes saw the direct call
    assert report.note == ""
    for seen in [first, second] if how == "list" else [first]:
        assert seen.targets and not _undecided(seen)
        assert any("never_missing.put_row.default" in t for t in seen.targets)
    assert "did not run" not in caplog.text


def test_backstop_does_nothing_where_the_pass_ran():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: x * 2)(torch.randn(2))
    before = gm.code
    inductor.DeviceBackstop()(gm)
    assert gm.code == before


def test_backstop_in_every_device_slot_and_in_the_cache_key(registered):
    from torch._inductor.codegen.common import custom_backend_passes

    inductor.install_pass()
    assert custom_backend_passes and all(
        isinstance(p, inductor.DeviceBackstop) for p in custom_backend_passes.values()
    )
    key = custom_backend_passes["cpu"].uuid()
    assert key[1] == inductor.ReinplacePass().uuid()  # changes with autofunc's code and state


def test_backstops_wait_for_inductor_code_another_thread_still_imports(monkeypatch):
    # A first compile in another thread may be executing ``codegen.common`` when a registration
    # installs the pass: its table exists, ``init_backend_registration`` (defined further down)
    # not yet. The install skips it then (a later functionalized call installs the backstops),
    # where it raised AttributeError (test_startup_race.py, 1 run in 20 under load).
    import torch._inductor.codegen.common as common

    from autofunc.backends.inductor import glue as inductor

    monkeypatch.setattr(common.__spec__, "_initializing", True, raising=False)
    monkeypatch.delattr(common, "init_backend_registration")
    inductor._install_backstops()  # no AttributeError
    monkeypatch.undo()
    inductor._install_backstops()
    assert all(
        isinstance(p, inductor.DeviceBackstop) for p in common.custom_backend_passes.values()
    )

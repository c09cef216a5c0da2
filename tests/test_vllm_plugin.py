"""The vLLM plugin's settings, without vLLM (autofunc/integrations/vllm.py):
``AUTOFUNC_VLLM_FORCE_COMPILE=1`` keeps vLLM's compile mode with autofunc's pass off too, and
the plugin does nothing with neither variable set. tests/test_vllm.py runs vLLM itself."""

from __future__ import annotations

import pytest

from autofunc.integrations import vllm as plugin


@pytest.fixture
def calls(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(plugin, "_keep_compile_mode_on_cpu", lambda: seen.append("force"))
    monkeypatch.setattr(plugin, "_wrap_pass_manager", lambda: seen.append("wrap"))
    monkeypatch.setattr(plugin, "_loaded", None)
    monkeypatch.delenv("AUTOFUNC_VLLM", raising=False)
    monkeypatch.delenv("AUTOFUNC_VLLM_FORCE_COMPILE", raising=False)
    return seen


def test_force_compile_without_autofunc(calls, monkeypatch):
    monkeypatch.setenv("AUTOFUNC_VLLM_FORCE_COMPILE", "1")
    plugin.load()
    assert calls == ["force"] and plugin._loaded is None  # vLLM alone, in its compile mode


def test_nothing_without_either_variable(calls, monkeypatch):
    monkeypatch.setenv("AUTOFUNC_VLLM_FORCE_COMPILE", "0")
    plugin.load()
    assert calls == []


def test_force_compile_setting_is_checked(monkeypatch):
    for value, wanted in (("1", True), ("true", True), ("0", False), ("", False)):
        monkeypatch.setenv("AUTOFUNC_VLLM_FORCE_COMPILE", value)
        assert plugin.force_compile() is wanted
    monkeypatch.setenv("AUTOFUNC_VLLM_FORCE_COMPILE", "yes please")
    with pytest.raises(ValueError, match="AUTOFUNC_VLLM_FORCE_COMPILE"):
        plugin.force_compile()

"""autofunc inside vLLM itself: a tiny random Llama through vLLM's CPU build, eager
tokens against compiled tokens, in both of vLLM's compile modes, with two tensor-parallel ranks,
and Qwen3, Phi-3 and Mixtral in its multi-process engine, through the one setting a user makes
(``AUTOFUNC_VLLM``; autofunc/integrations/vllm.py).

Each case runs ``examples/vllm_offline.py`` (fresh processes, compile caches off), which also
reports autofunc's decisions and counts the copy nodes of the graphs Inductor lowers. Needs the
``[vllm]`` extra (CI installs it: ``AUTOFUNC_SETUP_VLLM=1 ./scripts/setup.sh``); skipped without.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (pip install '.[vllm]'; CI: AUTOFUNC_SETUP_VLLM=1)",
    ),
]

EXAMPLE = Path(__file__).parent.parent / "examples" / "vllm_offline.py"


@pytest.fixture(scope="module")
def eager_json(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm") / "eager.json"


def run(eager_json: Path, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--json", str(out), "--eager-json", str(eager_json), *args],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["same_tokens"], (result["eager"]["tokens"], result["compiled"]["tokens"])
    return result


def _copies(result: dict) -> list:
    """The copy nodes (name, bytes) of every graph Inductor lowered in the compiled run."""
    return [c for graph in result["compiled"]["copies"] for c in graph]


def _report_copies(result: dict) -> list:
    """The copy nodes (name, bytes) the reports count, for mutations or not."""
    return [c[:2] for report in result["compiled"]["report_copies"] for c in report]


def _rows(result: dict) -> list[list[str]]:
    """The report rows: call, op, strategy, argument, buffer, view, result, bytes, why."""
    return result["compiled"]["rows"]


def test_default_mode_decides_pytorch_nodes(eager_json, tmp_path):
    result = run(eager_json, tmp_path)
    rows = _rows(result)
    ops = {r[1] for r in rows}
    assert {"_C::onednn_mm.default", "vllm::unified_attention_with_output.default"} <= ops
    assert {r[2] for r in rows} == {"pytorch_v1"}  # vLLM keeps PyTorch's v1 nodes
    # every buffer is written in place, and no copy is left in the lowered graphs (the rotary's
    # write-back scatters fold: Note [A split's piece is a slice]); vLLM alone copies 8 here
    assert all(r[6] in ("in place", '"') for r in rows), rows
    assert _copies(result) == [] == _report_copies(result)


def test_report_counts_every_copy(eager_json, tmp_path):
    """With re-inplacing off every buffer keeps its clone, and v1's write-back scatters stay
    (Inductor turns them into copies into views): the reports count exactly the copy nodes of
    the graphs Inductor lowers (Note [Every copy in the report])."""
    result = run(eager_json, tmp_path, "--no-reinplace")
    copies = _copies(result)
    assert len(copies) > 8  # at least vLLM's own 8, and a clone per mutable buffer
    assert sorted(_report_copies(result)) == sorted(copies)
    kinds = {c[2] for report in result["compiled"]["report_copies"] for c in report}
    assert {"CLONE", "WRITE_BACK"} <= kinds


def test_attention_op_registered(eager_json, tmp_path):
    result = run(eager_json, tmp_path, "--autofunc", "register")
    rows = _rows(result)
    attention = [r for r in rows if r[1] == "vllm::unified_attention_with_output.default"]
    assert attention and all(r[2] == "v2" and r[6] == "in place" for r in attention)
    assert all(r[6] in ("in place", '"') for r in rows), rows  # no clone at all
    assert _copies(result) == [] == _report_copies(result)


def test_vllm_compile_mode(eager_json, tmp_path):
    result = run(eager_json, tmp_path, "--compile-mode", "vllm")
    assert result["compiled"]["vllm_mode"] == "VLLM_COMPILE"
    reports = result["compiled"]["reports"]
    assert reports and all("in vLLM's pass manager" in r for r in reports)
    assert _copies(result) == [] == _report_copies(result)


def test_vllm_compile_mode_without_autofunc(eager_json, tmp_path):
    """AUTOFUNC_VLLM_FORCE_COMPILE=1 alone: vLLM in its own compile mode, as it is (piecewise:
    2 layers, 3 pieces; its FixFunctionalizationPass, no autofunc pass), not the whole-graph
    mode vLLM falls back to on CPU."""
    result = run(eager_json, tmp_path, "--compile-mode", "vllm", "--autofunc", "0")
    compiled = result["compiled"]
    assert compiled["vllm_mode"] == "VLLM_COMPILE"
    assert len(compiled["copies"]) == 3  # the pieces around the 2 attention calls
    assert compiled["reports"] == []
    # vLLM's own pass manager removes the clones and keeps the rotary's write-back scatters
    copies = _copies(result)
    assert len(copies) == 4 and all(c[0].startswith("slice_scatter") for c in copies), copies


@pytest.fixture(scope="module")
def eager_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-archs")


def _no_mutation_copies(result: dict) -> None:
    """No copy for a mutation left, counted in the lowered graphs of every process and in the
    reports (each process writes its own: AUTOFUNC_VLLM_REPORT_DIR)."""
    compiled = result["compiled"]
    assert compiled["copies"], "no lowered graph reached the report folder"
    assert compiled["reports"], "no report reached the report folder"
    assert _copies(result) == [] == _report_copies(result), (_copies(result), compiled["reports"])
    assert all(r[6] in ("in place", '"') for r in _rows(result)), _rows(result)


# One run per architecture with AUTOFUNC_VLLM=register, one with =1 and one in vLLM's own
# compile mode, each in the default multi-process engine (which these runs cover for the Llama
# too): not the cross product (the tier's time, tests/conftest.py).
ARCH_RUNS = [
    ("qwen3", "register", "default"),  # q/k norms on split views of the qkv buffer
    ("phi3", "register", "default"),  # partial rotary: slices of heads
    ("mixtral", "register", "default"),  # mixture of experts
    ("qwen3", "1", "default"),
    ("phi3", "1", "vllm"),  # vLLM's compile mode forced (AUTOFUNC_VLLM_FORCE_COMPILE=1)
]


@pytest.mark.parametrize(("arch", "setting", "mode"), ARCH_RUNS)
def test_architecture(eager_dir, tmp_path, arch, setting, mode):
    result = run(eager_dir / f"{arch}.json", tmp_path, "--mp", "--arch", arch,
                 "--autofunc", setting, "--compile-mode", mode)
    assert result["compiled"]["vllm_mode"] == ("VLLM_COMPILE" if mode == "vllm" else
                                               "DYNAMO_TRACE_ONCE")
    _no_mutation_copies(result)
    if setting == "register":
        attention = [r for r in _rows(result)
                     if r[1] == "vllm::unified_attention_with_output.default"]
        assert attention and all(r[2] == "v2" for r in attention)


def test_two_tensor_parallel_ranks(eager_json, tmp_path):
    """tensor_parallel_size=2 on vLLM's CPU build (two worker processes, gloo and its
    shared-memory all-reduce): each rank loads the plugin, compiles its own graph with the
    all-reduce between the mutable ops, and writes its report (AUTOFUNC_VLLM_REPORT_DIR)."""
    result = run(eager_json, tmp_path, "--tp", "2", "--autofunc", "register")
    processes = [p for p in result["compiled"]["processes"] if p["reports"]]
    assert sorted(p["rank"] for p in processes) == [0, 1]
    assert len({p["pid"] for p in processes}) == 2
    ops = {r[1] for r in _rows(result)}
    assert any("allreduce" in op or "all_reduce" in op for op in ops), ops
    _no_mutation_copies(result)

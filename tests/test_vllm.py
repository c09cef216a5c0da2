"""autofunc inside vLLM itself: a tiny random Llama through vLLM's CPU build, eager
tokens against compiled tokens, in both of vLLM's compile modes and with its multi-process
engine, through the one setting a user makes (``AUTOFUNC_VLLM``; autofunc/integrations/vllm.py).

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


def test_multiprocess_engine(eager_json, tmp_path):
    run(eager_json, tmp_path, "--mp", "--autofunc", "register")

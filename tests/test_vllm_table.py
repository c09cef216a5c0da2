"""tools/vllm_table.py (no vLLM needed): each row says the custom-op setting, the compile mode
vLLM ran in and the command that reproduces it; ``--update`` replaces the block between its
markers and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

from tools import vllm_table


def _run(tmp_path: Path, name: str, **config) -> Path:
    cfg = {"autofunc": "0", "compile_mode": "default", "mp": False, "tokens": 256,
           "max_tokens": 8, "custom_ops": "+rotary_embedding", **config}
    graphs = 3 if cfg["compile_mode"] == "vllm" else 1
    compiled = {
        "copies": [[["slice_scatter_default", 1024]]] + [[]] * (graphs - 1),
        "reports": [], "init_s": 20.0, "tokens": [[1]],
        "vllm_mode": "VLLM_COMPILE" if graphs == 3 else "DYNAMO_TRACE_ONCE",
        "vllm_custom_ops": ["none"], "max_num_batched_tokens": 2048,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"config": cfg, "compiled": compiled, "same_tokens": True}))
    return path


def test_rows_name_their_settings_and_command(tmp_path):
    paths = [
        _run(tmp_path, "a", custom_ops="default", compile_mode="vllm"),
        _run(tmp_path, "b", compile_mode="vllm", autofunc="1"),
        _run(tmp_path, "c"),
    ]
    text = vllm_table.table(paths)
    assert "2048 tokens" in text.split("\n\n")[0]
    rows = [ln for ln in text.splitlines() if ln.startswith("| `") or ln.startswith("| vLLM's")]
    # the rotary rows first, each mode's vLLM alone before autofunc
    assert rows[0].startswith("| `+rotary_embedding` | DYNAMO_TRACE_ONCE")
    assert "`python examples/vllm_offline.py --autofunc 0` |" in rows[0]
    assert "VLLM_COMPILE: 3 pieces" in rows[1] and "AUTOFUNC_VLLM=1" in rows[1]
    assert rows[2].startswith("| vLLM's default (`none`) | VLLM_COMPILE")
    assert "vLLM alone" in rows[2]
    assert rows[2].endswith(
        "`python examples/vllm_offline.py --autofunc 0 --compile-mode vllm --custom-ops default` |"
    )


def test_update_replaces_between_the_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n\n<!-- vllm-table -->\n| old |\n|---|\n\nafter\n")
    vllm_table.update(doc, "NEW")
    assert doc.read_text() == "intro\n\n<!-- vllm-table -->\nNEW\n<!-- /vllm-table -->\n\nafter\n"
    vllm_table.update(doc, "NEWER")
    assert doc.read_text() == (
        "intro\n\n<!-- vllm-table -->\nNEWER\n<!-- /vllm-table -->\n\nafter\n"
    )


def test_arch_table_rows(tmp_path):
    """--by-arch: one row per architecture, rank count and setting, with its command."""
    paths = [
        _run(tmp_path, "m", arch="mixtral", mp=True, autofunc="register"),
        _run(tmp_path, "l", arch="llama", tp=2, mp=False, autofunc="0"),
    ]
    rows = vllm_table.arch_table(paths).splitlines()[2:]
    assert rows[0].startswith("| Llama | 2 |") and "--autofunc 0 --tp 2`" in rows[0]
    assert rows[1].startswith("| Mixtral") and "--arch mixtral --mp`" in rows[1]
    assert "| 1 | 1.0 KiB |" in rows[1]

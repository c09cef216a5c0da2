"""examples/vllm_decoder.py runs as its docstring says (``python examples/vllm_decoder.py``), in
a fresh process with a fresh Inductor cache: it exits 0 and prints, per strategy, that the
compiled step equals eager and autofunc's report (examples/tp_decoder.py runs on two ranks in
test_tp_decoder.py; the README's Example in test_readme.py). One Inductor compile per strategy:
about 40 s on a loaded 2-core machine, so ``slow``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_vllm_decoder_example(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "vllm_decoder.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "all results match eager", out.stdout
    assert [ln for ln in lines if ln.startswith("== autofunc")] == [
        "== autofunc v1 ==",
        "== autofunc v2 ==",
    ]
    matches = "  output matches eager: True; final kv_cache matches eager: True"
    assert lines.count(matches) == 2, out.stdout
    # the 2-layer step: 4 calls per layer, only the first layer's hidden state (a graph input
    # the graph keeps) cloned, under either strategy
    summaries = [ln for ln in lines if " call(s), " in ln]
    assert [s.split(":")[0] for s in summaries] == ["8 call(s), 1 clone(s)"] * 2, out.stdout
    assert all(s.startswith("1.0 KiB cloned", s.index(": ") + 2) for s in summaries), summaries

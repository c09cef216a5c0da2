"""autofunc's decisions where PyTorch's compile diagnostics go (Note [Diagnostics the PyTorch
way] in autofunc/inductor.py): ``TORCH_LOGS=autofunc``, the structured trace ``tlparse`` reads,
and ``torch._dynamo.utils.counters``. One compile of the decoder through Inductor in a fresh
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PROGRAM = textwrap.dedent(
    """
    import json
    import torch
    import torch._inductor.config as inductor_config
    import autofunc
    from autofunc.bench.cases import example_kv
    from torch._dynamo.utils import counters

    fn, args, ops = example_kv()  # the 2-layer decoder: 4 mutable ops per layer
    for op in ops:
        autofunc.register(op)
    with inductor_config.patch(fx_graph_cache=False):
        torch.compile(fn)(*args)
    print("COUNTERS", json.dumps(dict(counters["autofunc"])))
    """
)


def test_log_trace_artifact_and_counters(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TORCH_LOGS": "autofunc",
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # TORCH_LOGS=autofunc: the report, once per graph
    assert "autofunc re-inplace report" in proc.stderr
    assert "autofunc_kernels::reshape_and_cache.default" in proc.stderr
    # counters beside Inductor's: 8 calls, one clone (the hidden state, results/README.md)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("COUNTERS"))
    counts = json.loads(line.split(" ", 1)[1])
    assert counts["calls"] == 8 and counts["cloned"] == 1 and counts["inplace"] >= 7
    assert counts["bytes_saved"] > counts["bytes_cloned"] > 0
    # the structured trace: an artifact tlparse lists by name, holding the report
    logs = "".join(p.read_text() for p in (tmp_path / "trace").glob("*.log"))
    assert '"name": "autofunc_reinplace_report"' in logs
    assert "autofunc re-inplace report" in logs

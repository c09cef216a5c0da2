"""autofunc's decisions where PyTorch's compile diagnostics go (Note [Diagnostics the PyTorch
way] in autofunc/backends/inductor/glue.py): ``TORCH_LOGS=+autofunc`` (the report at INFO, each decision at
DEBUG), the structured trace ``tlparse`` reads, and ``torch._dynamo.utils.counters``. One
compile of the decoder through Inductor in a fresh process."""

from __future__ import annotations

import json
import os
import re
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
    from autofunc.inductor import collect_reports
    from torch._dynamo.utils import counters

    fn, args, ops = example_kv()  # the 2-layer decoder: 4 mutable ops per layer
    for op in ops:
        autofunc.register(op)
    with inductor_config.patch(fx_graph_cache=False), collect_reports() as reports:
        torch.compile(fn)(*args)
    print("COUNTERS", json.dumps(dict(counters["autofunc"])))
    for report in reports:
        for call in report.calls:
            for d in call.decisions:
                print("DECISION", json.dumps([call.node, call.op, list(d.args), d.reason.value]))
    """
)

# The 2-layer decoder (ModelConfig(layers=2), bf16/f32 as built by bench.cases): per layer
# fused_add_rms_norm (x, residual: 1 KiB each), rotary_embedding (query and key, one 2 KiB
# buffer), reshape_and_cache (key_cache and value_cache, one 128 KiB buffer) and
# paged_decode_attention (out: 1 KiB). Only the first layer's x, a graph input the graph keeps,
# is cloned (results/README.md).
EXPECTED_COUNTERS = {
    "calls": 8,
    "inplace": 9,  # buffers: 2 + 1 + 1 + 1 per layer, less the one clone
    "cloned": 1,
    "bytes_cloned": 1024,
    "bytes_saved": 2 * (1024 + 2048 + 128 * 1024 + 1024) + 1024,  # 271360
    "copies": 1,  # the clone is the graph's one copy for a mutation
    "bytes_copied": 1024,
}


def test_log_trace_artifact_and_counters(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TORCH_LOGS": "+autofunc",
        "TORCH_TRACE": str(tmp_path / "trace"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # TORCH_LOGS=autofunc (INFO): the report, once per graph
    assert proc.stderr.count("autofunc re-inplace report") == 1
    assert "autofunc_kernels::reshape_and_cache.default" in proc.stderr
    assert "8 call(s), 1 clone(s): 1.0 KiB cloned, 265.0 KiB saved" in proc.stderr
    # counters beside Inductor's, exact for this fixed program
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("COUNTERS"))
    assert json.loads(line.split(" ", 1)[1]) == EXPECTED_COUNTERS
    # +autofunc (DEBUG): one line per decision, as it is made, in the report's order
    decisions = [
        json.loads(ln.split(" ", 1)[1])
        for ln in proc.stdout.splitlines()
        if ln.startswith("DECISION")
    ]
    assert len(decisions) == 10  # 5 buffers per layer
    logged = [
        ln.split("] ", 1)[1]
        for ln in proc.stderr.splitlines()
        if re.search(r"autofunc/passes/reinplace\.py:\d+\]", ln)
    ]
    logged = [re.sub(r"^\[[^\]]*\] ", "", ln).rstrip() for ln in logged]  # the compile id
    expected = [f"{node} {op} {args}: {why}" for node, op, args, why in decisions]
    assert len(logged) == len(expected)
    for got, want in zip(logged, expected):
        assert got.startswith(want), (got, want)
    reasons = [why for *_, why in decisions]
    assert reasons.count("written in place") == 9
    # the structured trace: an artifact tlparse lists by name, holding the report
    logs = "".join(p.read_text() for p in (tmp_path / "trace").glob("*.log"))
    assert '"name": "autofunc_reinplace_report"' in logs
    assert "autofunc re-inplace report" in logs

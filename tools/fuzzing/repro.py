"""Reproducer scripts for failures: one file per failure, run against this checkout."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .check import Failure

_ROOT = str(Path(__file__).resolve().parents[2])  # the repository root, above ``tools``


_REPRO = '''\
"""Minimal reproducer found by the fuzzer in tools/fuzzing ({origin}).

strategy={strategy!r} path={path!r}: {kind}: {message}
{detail}
{triage}{builtin}
Run: PYTHONPATH={root} python {filename}   (or pytest {filename}, same PYTHONPATH)
"""

import torch
import torch._functorch.config
import torch._inductor.config

import autofunc
from autofunc.testing import compile_capture, output_aliasing, same_result
from tools import fuzzing as fuzz  # defines the autofunc_fuzz ops (see their docstrings)
from tools.fuzzing.check import memory_seen
from tools.fuzzing.ops import seen
from tools.report_copies import check_report_copies, program_copies

ops = torch.ops.autofunc_fuzz
regions = fuzz.REGIONS  # the nested_compile_region functions (Features.regions)
STRATEGY = {strategy!r}  # "builtin": the ops are left to PyTorch's auto_functionalized
PATH = {path!r}


{program}

def _compile(fn, own):
    if PATH == "aot_eager":
        return torch.compile(fn, backend="aot_eager", fullgraph=True), None
    if PATH == "capture":  # AOTAutograd + autofunc.reinplace on the forward graph, no Inductor
        before = lambda gm: own.append(program_copies(gm))  # noqa: E731
        return compile_capture(fn, fullgraph=True, before_pass=before)
    return torch.compile(fn, fullgraph=True), None


def test_repro():
    torch._dynamo.reset()
    eager_inputs = make_inputs()
    with seen() as eager_seen:  # the memory each call sees
        expected = prog(*eager_inputs)
    regs = fuzz.register_strategy(STRATEGY)
    own = []
    try:
        inputs = make_inputs()
        # No compile caches: a cached artifact may come from another strategy.
        with torch._functorch.config.patch(enable_autograd_cache=False), \\
                torch._inductor.config.patch(fx_graph_cache=False):
            compiled, captured = _compile(prog, own)
            with seen() as compiled_seen:
                got = compiled(*inputs)
    finally:
        for r in regs:
            r.remove()
    for i, (e, g) in enumerate(zip(expected, got)):
        assert same_result(e, g), f"output {{i}}: eager {{e}} vs compiled {{g}}"
    for i, (e, g) in enumerate(zip(eager_inputs, inputs)):
        assert same_result(e, g), f"input {{i}} after the call: eager {{e}} vs compiled {{g}}"
    unseen = memory_seen(eager_seen, compiled_seen)
    assert not unseen, unseen
    assert output_aliasing(got, inputs) == output_aliasing(expected, eager_inputs), "aliasing"
    if captured is not None and captured.reports:  # the report counts every copy
        check_report_copies(captured, own)

{bytes_test}
if __name__ == "__main__":
    test_repro()
{bytes_call}    print("passed")
{graphs}'''

# A ``bytes`` failure: both configurations right, autofunc's allocating more.
_BYTES_TEST = '''

def _allocated(strategy):
    """Bytes one warm compiled call allocates under ``strategy`` (tools.compare's measure)."""
    from autofunc.bench.measure import measure_memory

    torch._dynamo.reset()
    regs = fuzz.register_strategy(strategy)
    try:
        with torch._functorch.config.patch(enable_autograd_cache=False), \\
                torch._inductor.config.patch(fx_graph_cache=False):
            compiled, _ = _compile(prog, [])
            compiled(*make_inputs())
            fresh = make_inputs()
            return measure_memory(lambda: compiled(*fresh)).allocated
    finally:
        for r in regs:
            r.remove()
        torch._dynamo.reset()


def test_bytes():
    ours, builtin = _allocated(STRATEGY), _allocated("builtin_v2")
    assert ours <= builtin, f"autofunc {{STRATEGY}}: {{ours}} B, the built-in v2: {{builtin}} B"
'''


def _repro_name(failure: Failure) -> str:
    key = f"{failure.program.full_source()}|{failure.strategy}|{failure.path}"
    return f"fuzz_repro_{hashlib.sha1(key.encode()).hexdigest()[:10]}.py"


def repro_source(failure: Failure, triage_result: dict[str, str] | None = None) -> str:
    name = _repro_name(failure)
    tri = ""
    if triage_result:
        rows = "\n".join(f"  {k}: {v}" for k, v in triage_result.items())
        tri = f"Same program elsewhere:\n{rows}\n"
    detail = failure.detail if failure.kind == "mismatch" else failure.detail.split("\n", 1)[0]
    if not detail.startswith(("raised at", "output", "input", "bytes allocated")):
        detail = ""
    graphs = ""
    if failure.graphs:
        graphs = "\n# " + "\n# ".join(failure.graphs.splitlines()) + "\n"
    return _REPRO.format(
        origin=failure.program.origin or "no origin",
        strategy=failure.strategy,
        path=failure.path,
        kind=failure.kind,
        message=failure.message.replace('"""', "'''"),
        detail=detail.replace('"""', "'''").replace("\\", "\\\\"),
        triage=tri,
        builtin=f"PyTorch's built-in v2 on it: {failure.builtin}\n" if failure.builtin else "",
        filename=name,
        program=failure.program.full_source(),
        graphs=graphs,
        root=_ROOT,
        bytes_test=_BYTES_TEST.format() if failure.kind == "bytes" else "",
        bytes_call="    test_bytes()\n" if failure.kind == "bytes" else "",
    )


def write_repro(
    failure: Failure, out_dir: str | Path, triage_result: dict[str, str] | None = None
) -> Path:
    """Write ``fuzz_repro_<hash>.py`` (hash of program, strategy and path) into ``out_dir``;
    returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / _repro_name(failure)
    path.write_text(repro_source(failure, triage_result))
    return path

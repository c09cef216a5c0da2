"""The README's commands work as printed, run the way a new user runs them: from a folder of
their own (a fresh temporary one: no output folder exists yet), with the venv's ``bin/`` first on
``PATH`` (what ``. .venv/bin/activate`` does) and a fresh Inductor cache.

The commands come from the README itself (its command table and its Example), so the test
follows the README. The fast rows run as printed; the bench's row runs as printed plus its
smallest settings (one case, one size, three lines, in process: 10-20 s where ``--quick`` takes
minutes), and ``explain`` adds ``--backend aot_eager`` (one of the options its row lists).
The Example (one Inductor compile of a 4-layer step, 30-40 s on a loaded 2-core machine) is
marked ``slow``.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent  # the venv's bin/, where the console script is


def _table_commands() -> list[str]:
    """The first cell of each row of the README's command table, unescaped."""
    section = README.split("## Commands and how long they take", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(.+?)` \|", section, re.M)
    return [row.replace("\\|", "|") for row in rows]


def _row(prefix: str) -> list[str]:
    (command,) = [c for c in _table_commands() if c.startswith(prefix)]
    return shlex.split(command)


def _run_as_user(argv: list[str], tmp_path: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
    }
    if not (BIN / "autofunc").exists():  # no console script (not installed): the module is it
        argv = [sys.executable, "-m", "autofunc", *argv[1:]] if argv[0] == "autofunc" else argv
    out = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, (
        f"{shlex.join(argv)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
    )
    return out


def test_the_readme_says_how_to_reach_the_console_script():
    assert ". .venv/bin/activate" in README and ".venv/bin/autofunc" in README


def test_the_bench_row_creates_its_output_folders(tmp_path):
    argv = _row("autofunc bench --quick")
    assert "bench-results/q.json" in argv and "bench-results/q.png" in argv
    smallest = ["--cases", "reshape_and_cache", "--sizes", "16x1", "--repeat", "1",
                "--strategies", "eager,builtin_v2,autofunc_v2", "--in-process"]  # fmt: skip
    out = _run_as_user([*argv, *smallest], tmp_path, timeout=300)
    assert (tmp_path / "bench-results" / "q.json").stat().st_size > 0
    assert (tmp_path / "bench-results" / "q.png").read_bytes()[:4] == b"\x89PNG"
    assert "verdict: autofunc_v2 is right on 1/1 points" in out.stdout


def test_the_explain_row_prints_a_report(tmp_path):
    argv = _row("autofunc explain autofunc.")
    out = _run_as_user([*argv, "--backend", "aot_eager"], tmp_path, timeout=300)
    assert out.stdout.startswith("autofunc re-inplace report")
    assert re.search(r"^\d+ call\(s\), \d+ clone\(s\)", out.stdout, re.M)


@pytest.mark.slow
def test_the_example_prints_what_the_readme_shows(tmp_path):
    example = re.search(r"## Example\n\n```python\n(.*?)```", README, re.S).group(1)
    printed = re.search(r"It prints[^\n]*\n\n```\n(.*?)```", README, re.S).group(1)
    (tmp_path / "example.py").write_text(example)
    out = _run_as_user(["python", "example.py"], tmp_path, timeout=600)
    lines = out.stdout.splitlines()
    for line in printed.splitlines():
        if line != "...":
            assert line in lines, f"the README shows {line!r}; the example printed:\n{out.stdout}"

"""The ``autofunc`` command line on user errors: one line on stderr, exit status 2, no traceback,
and nothing run (no sweep, no compile) before the error is found."""

import subprocess
import sys
import textwrap

import pytest

import autofunc
from autofunc.bench import compile_time, run
from autofunc.cli import main

# A module of explain targets, written to a temporary folder on sys.path.
_TARGETS = textwrap.dedent(
    """
    def returns_none():
        return None

    def returns_pair_of_ints():
        return 1, 2

    def args_not_a_tuple():
        return (lambda x: x), "x"

    def raises():
        raise RuntimeError("target is broken")

    def decode(kv, rows, index):
        return kv

    not_callable = 3
    """
)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a sweep, a compile-time run or an explain starts."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the user error was reported")

    monkeypatch.setattr(run, "run_sweep", forbidden)
    monkeypatch.setattr(compile_time, "run", forbidden)
    monkeypatch.setattr("autofunc.bench.kernels.main", forbidden)
    monkeypatch.setattr("autofunc.bench.triton_cache.main", forbidden)
    monkeypatch.setattr(autofunc, "explain", forbidden)


@pytest.fixture
def targets(tmp_path, monkeypatch):
    (tmp_path / "cli_targets.py").write_text(_TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "cli_targets"
    sys.modules.pop("cli_targets", None)


def _run(argv):
    """main(argv)'s exit status, whether returned or raised (argparse exits)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _assert_usage_error(capsys, argv, message):
    assert _run(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert message in lines[0] and "Traceback" not in captured.err


# (argv, a part of the one stderr line)
BENCH_ERRORS = {
    "sizes not integers": (["bench", "--sizes", "16xa"], "--sizes must be"),
    "sizes not pairs": (["bench", "--sizes", "16x2x3"], "BLOCKSxLAYERS"),
    "sizes zero": (["bench", "--sizes", "0x2"], "positive integers"),
    "json dir under a file": (
        ["bench", "--json", "/dev/null/dir/x.json"],
        "cannot create directory '/dev/null/dir': '/dev/null' is a file",
    ),
    "plot dir under a file": (["bench", "--plot", "/dev/null/dir/x.png"], "is a file"),
    "repeat not int": (["bench", "--repeat", "abc"], "invalid int value: 'abc'"),
    "repeat negative": (["bench", "--repeat", "-1"], "--repeat must be >= 0"),
    "unknown case": (["bench", "--cases", "nope"], "['nope']"),
    "unknown device": (["bench", "--device", "tpu"], "--device must be cpu or cuda"),
    "layers not integers": (["bench-compile", "--layers", "8,x"], "--layers must be"),
    "layers zero": (["bench-compile", "--layers", "0,8"], "positive integers"),
    "compile json": (["bench-compile", "--json", "/dev/null/a.json"], "is a file"),
    "compile repeat zero": (["bench-compile", "--repeat", "0"], "--repeat must be >= 1"),
    "kernels max-gib": (["bench-kernels", "--max-gib", "0"], "--max-gib must be > 0"),
    "kernels device": (["bench-kernels", "--device", "tpu"], "--device must be cpu or cuda"),
    "triton layers": (["bench-triton", "--layers", "2,x"], "--layers must be"),
    "triton json": (["bench-triton", "--json", "/dev/null/a.json"], "is a file"),
    "triton device": (["bench-triton", "--device", "cuda:0"], "--device must be cpu or cuda"),
    "no command": ([], "required: command"),
}


@pytest.mark.parametrize("argv, message", BENCH_ERRORS.values(), ids=BENCH_ERRORS)
def test_bench_user_errors(argv, message, capsys, no_work):
    _assert_usage_error(capsys, argv, message)


def test_bench_compile_arguments_are_parsed_once(monkeypatch):
    # The CLI hands its own parse to the benchmark: no second parser, no re-serialised argv.
    seen = []
    monkeypatch.setattr(compile_time, "main", lambda args: seen.append(args) or 0)
    argv = ["--layers", "8,16", "--repeat", "2", "--budget", "5", "--timeout", "30"]
    assert main(["bench-compile", *argv]) == 0
    (args,) = seen
    assert (args.layers, args.repeat, args.budget, args.timeout) == ("8,16", 2, 5.0, 30.0)
    assert (args.device, args.json) == ("cpu", "")


def test_output_folders_are_created_once_the_arguments_are_checked(tmp_path, monkeypatch, capsys):
    # The README's `--json bench-results/q.json` in a fresh clone: the folder does not exist yet.
    monkeypatch.setattr(compile_time, "main", lambda args: 0)
    assert main(["bench-compile", "--json", str(tmp_path / "new" / "deeper" / "c.json")]) == 0
    assert (tmp_path / "new" / "deeper").is_dir()
    # a usage error found later leaves no folder behind
    argv = ["bench-compile", "--json", str(tmp_path / "never" / "c.json"), "--repeat", "0"]
    assert _run(argv) == 2
    assert not (tmp_path / "never").exists()
    capsys.readouterr()


def test_bench_json_is_a_directory(tmp_path, capsys, no_work):
    _assert_usage_error(capsys, ["bench", "--json", str(tmp_path)], "is a directory")


EXPLAIN_ERRORS = {
    "no colon": ("cli_targets", "expected MODULE:FUNCTION"),
    "missing module": ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    "missing function": ("cli_targets:nope", "has no attribute 'nope'"),
    "not callable": ("cli_targets:not_callable", "non-callable 'not_callable'"),
    "returns None": ("cli_targets:returns_none", "must return (fn, args)"),
    "returns ints": ("cli_targets:returns_pair_of_ints", "must return (fn, args)"),
    "args not a tuple": ("cli_targets:args_not_a_tuple", "must return (fn, args)"),
    "target raises": ("cli_targets:raises", "raised RuntimeError: target is broken"),
    "target takes arguments": (
        "cli_targets:decode",
        "cli_targets:decode takes arguments (kv, rows, index), but FUNCTION must be a "
        "zero-argument factory that returns (fn, args)",
    ),
}


@pytest.mark.parametrize("target, message", EXPLAIN_ERRORS.values(), ids=EXPLAIN_ERRORS)
def test_explain_user_errors(target, message, capsys, targets, no_work):
    _assert_usage_error(capsys, ["explain", target], message)


def test_cli_process_prints_one_line_and_exits_2():
    # The installed entry point end to end: no traceback reaches the terminal.
    result = subprocess.run(
        [sys.executable, "-m", "autofunc", "explain", "no_such_module_xyz:f"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "autofunc explain: cannot import 'no_such_module_xyz': ModuleNotFoundError: No module "
        "named 'no_such_module_xyz'"
    ]


def test_version_and_sweep_help(capsys):
    from autofunc.bench.cases import CASES
    from autofunc.bench.configs import CONFIGS

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"autofunc {autofunc.__version__}"
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = capsys.readouterr().out
    lines = help_text.splitlines()
    for name in ("--quick", "--full", "--gpu"):
        line = next(li for li in lines if li.strip().startswith(name))
        assert len(line.split()) > 1, line  # each sweep says what it runs
    assert "Compile each case with each strategy" in help_text  # a description
    # every valid --cases and --strategies value on a line of its own, with what it is
    notes = {**{n: c.note for n, c in CASES.items()}, **{n: c.note for n, c in CONFIGS.items()}}
    for name, note in notes.items():
        assert note and any(li.split() == [name, *note.split()] for li in lines), name
    assert lines.index("cases (--cases):") < lines.index("strategies (--strategies):")


def test_decorators_in_the_wrong_order_say_so():
    import torch

    with pytest.raises(autofunc.AutofuncError, match="put @autofunc.functionalize"):

        @torch.library.custom_op("autofunc_cli_test::wrong_order", mutates_args={"x"})
        @autofunc.functionalize(strategy="v2")
        def wrong_order(x: torch.Tensor) -> None:
            x.add_(1)


def test_an_empty_report_says_why():
    text = str(autofunc.Report())
    assert "no call of a mutable op registered with autofunc was compiled" in text


def test_ditto_marks_are_explained_below_the_table():
    from autofunc.passes.report import CallReport, Decision, Reason, Report

    two_args = Decision(("k", "v"), "arg0_1", ("[0, 0]", "[0, 1]"), Reason.INPLACE, 64)
    one_arg = Decision(("out",), "buf1", ("alias",), Reason.INPLACE, 8)
    table = str(Report([CallReport("autofunc_v2", "ns::op.default", "v2", [two_args])]))
    lines = table.splitlines()
    assert lines[4].startswith("autofunc_v2") and lines[4].endswith('"')  # v's row: k's buffer
    assert lines[5].startswith('" (result): the same buffer as the row above')
    # no ditto mark, no footer
    assert '" (result)' not in str(Report([CallReport("c", "ns::op", "v2", [one_arg])]))


def test_explain_imports_a_module_from_the_current_directory(tmp_path, monkeypatch, capsys):
    # The console script has no current directory on sys.path; `autofunc explain here:make`
    # must find here.py anyway, as `python -m` would.
    (tmp_path / "here_target_mod.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return (lambda x: x + 1), (torch.ones(2),)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert _run(["explain", "here_target_mod:make", "--backend", "aot_eager"]) == 0
    finally:
        sys.modules.pop("here_target_mod", None)
    assert "no call of a mutable op" in capsys.readouterr().out

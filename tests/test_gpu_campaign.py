"""``tools.gpu_campaign``: the runner's budgets and files, the argument checks, the README rows.

The dry run of the real parts is ``tests/test_bench.py::test_gpu_campaign_dry_run``. Here a
part of small Python steps runs for real, under budgets of 2 s with a 1 s grace.
"""

import dataclasses
import json
import tarfile
import textwrap

import pytest

from tools import gpu_campaign as gc

# writes {"points": [1]} to OUT/<name>.json at once, the second point when interrupted
SLEEPER = textwrap.dedent("""
    import json, os, sys, time
    path = os.path.join(os.environ["OUT"], sys.argv[1] + ".json")
    json.dump({"points": [1]}, open(path, "w"))
    print("measured 1", flush=True)
    if sys.argv[2] == "ignore":
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        json.dump({"points": [1, 2]}, open(path, "w"))
        sys.exit(130)
""")


@pytest.fixture
def small_part(monkeypatch):
    monkeypatch.setattr(gc, "GRACE_S", 1)
    monkeypatch.setitem(
        gc.ENTRY_POINTS, "python", gc.EntryPoint(("{python}", "-c", SLEEPER), lambda argv: None)
    )
    monkeypatch.setitem(
        gc.ENTRY_POINTS, "exit", gc.EntryPoint(("{python}", "-c"), lambda argv: None)
    )
    steps = (
        gc.Step("interrupted", "python", ("interrupted", "stop"), 2, ("interrupted.json",)),
        gc.Step("killed", "python", ("killed", "ignore"), 2, ("killed.json",)),
        gc.Step("failed", "exit", ("import sys; sys.exit(3)",), 5),
        gc.Step("ok", "exit", ("print('fine')",), 5, ("missing.json",)),
    )
    monkeypatch.setitem(gc.PARTS, "small", steps)
    return steps


def test_each_step_keeps_its_budget_and_leaves_its_partial_json(small_part, tmp_path):
    assert gc.run_part("small", tmp_path) == 1  # not every step was ok
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "small-logs.tar.gz",
        "small.json",
        "small.tsv",
    ]
    rows = [line.split("\t") for line in (tmp_path / "small.tsv").read_text().splitlines()]
    assert [(r[0], r[1], r[2], r[5]) for r in rows[1:]] == [
        ("interrupted", "out of budget", "130", "interrupted.json"),  # SIGINT, then it wrote
        ("killed", "out of budget", "-9", "killed.json"),  # SIGINT ignored: SIGKILL at 2 s
        ("failed", "failed", "3", ""),
        ("ok", "ok", "0", ""),
    ]
    assert all(float(r[3]) <= float(r[4]) + 0.5 for r in rows[1:])  # within each budget
    doc = json.loads((tmp_path / "small.json").read_text())
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["interrupted"]["outputs"] == {"interrupted.json": {"points": [1, 2]}}
    assert steps["killed"]["outputs"] == {"killed.json": {"points": [1]}}
    assert steps["ok"]["outputs"] == {"missing.json": None} and "fine" in steps["ok"]["log_tail"]
    assert "measured 1" in steps["killed"]["log_tail"]
    with tarfile.open(tmp_path / "small-logs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"small-logs/interrupted.log", "small-logs/killed.json", "small-logs/ok.log"} <= names


def test_the_files_are_written_after_every_step(small_part, tmp_path, monkeypatch):
    # a command killed part-way (the lease's 10 minutes) still leaves the steps done
    seen = []
    real = gc._write

    def write(out, part, results, work, dry_run):
        real(out, part, results, work, dry_run)
        seen.append((out / "small.tsv").read_text().count("\tnot run\t"))

    monkeypatch.setattr(gc, "_write", write)
    gc.run_part("small", tmp_path)
    assert seen == [3, 2, 1, 0]


@pytest.mark.parametrize("part", sorted(gc.PARTS))
def test_a_bad_option_does_not_parse(part):
    # the checks are the entry points' own parsers: an option they do not take is caught
    for step in gc.PARTS[part]:
        assert gc.check_arguments(step) == ""
        bad = dataclasses.replace(step, argv=(*step.argv, "--no-such-option"))
        assert gc.check_arguments(bad) != "", step.name
    pytest_step = next(s for s in gc.PARTS["part1"] if s.entry == "pytest")
    moved = dataclasses.replace(pytest_step, argv=("tests/no_such_test.py",))
    assert "no such test file" in gc.check_arguments(moved)
    compare = next(s for s in gc.PARTS["part2"] if s.entry == "compare")
    renamed = dataclasses.replace(compare, argv=("--programs", "kv_layers,kv_no_such_program"))
    assert "kv_no_such_program" in gc.check_arguments(renamed)
    assert "v3" in gc.check_arguments(dataclasses.replace(compare, argv=("--configs", "v3")))


MERGED = [
    {
        "part": "part1",
        "steps": [
            {
                "name": "setup",
                "status": "ok",
                "seconds": 12.0,
                "budget_s": 25,
                "summary": "env",
                "detail": "",
                "outputs": {"env.txt": "NVIDIA H200, 570.1, 141 GiB\npython 3.12\n"},
            },
            {
                "name": "kernels",
                "status": "out of budget",
                "seconds": 110.0,
                "budget_s": 110,
                "summary": "kernels",
                "detail": "",
                "outputs": {
                    "kernels.json": {
                        "records": [
                            {
                                "kernel": "paged_attention",
                                "goal": 0.7,
                                "fraction": 0.5,
                                "sdpa_speedup": 0.9,
                                "checked": True,
                                "error": "",
                            },
                            {
                                "kernel": "paged_attention",
                                "goal": 0.7,
                                "fraction": 0.75,
                                "sdpa_speedup": 1.5,
                                "checked": True,
                                "error": "",
                            },
                            {
                                "kernel": "rotary_embedding",
                                "goal": 0.8,
                                "fraction": None,
                                "checked": False,
                                "error": "OutOfMemoryError",
                            },
                        ]
                    }
                },
            },
            {
                "name": "tests_kernels",
                "status": "failed",
                "seconds": 70.5,
                "budget_s": 75,
                "summary": "junit",
                "detail": "",
                "outputs": {
                    "tests_kernels.xml": {
                        "tests": 10,
                        "failures": 1,
                        "errors": 0,
                        "skipped": 2,
                        "passed": 7,
                        "failed": ["tests.kernels.test_rotary::test_a"],
                    }
                },
            },
            {
                "name": "triton_cache",
                "status": "not run",
                "seconds": 0.0,
                "budget_s": 30,
                "summary": "triton_cache",
                "detail": "",
                "outputs": {"triton_cache.json": None},
            },
        ],
    },
    {
        "part": "part2",
        "steps": [
            {
                "name": "bench",
                "status": "ok",
                "seconds": 100.0,
                "budget_s": 120,
                "summary": "bench",
                "detail": "",
                "outputs": {
                    "bench.json": {
                        "records": [
                            {
                                "strategy": "eager",
                                "correct": True,
                                "error": "",
                                "mem_above_eager": 0,
                                "time_ratio": 1.0,
                            },
                            {
                                "strategy": "autofunc_v2",
                                "correct": True,
                                "error": "",
                                "mem_above_eager": -(2**20),
                                "time_ratio": 0.8,
                            },
                            {
                                "strategy": "autofunc_v2",
                                "correct": False,
                                "error": "",
                                "mem_above_eager": 0,
                                "time_ratio": 0.9,
                            },
                            {  # under a MiB: the row says KiB (not "-0 MiB")
                                "strategy": "builtin_v2",
                                "correct": True,
                                "error": "",
                                "mem_above_eager": -294912,
                                "time_ratio": 1.5,
                            },
                        ]
                    }
                },
            },
            {
                "name": "compare",
                "status": "ok",
                "seconds": 50.0,
                "budget_s": 60,
                "summary": "compare",
                "detail": "",
                "outputs": {
                    "compare.json": {
                        "rows": [
                            {"config": "eager", "correct": True, "error": ""},
                            {"config": "builtin_v2", "correct": None, "error": "crash (SIGSEGV)"},
                            {"config": "builtin_v2", "correct": True, "error": ""},
                        ]
                    }
                },
            },
        ],
    },
]


def test_readme_rows_from_merged_json():
    rows = gc.readme_rows(MERGED)
    assert rows[:2] == ["| part | step | status | s / budget | result |", "|---|---|---|---:|---|"]
    assert rows[2:] == [
        "| part1 | setup | ok | 12 / 25 | NVIDIA H200, 570.1, 141 GiB; python 3.12 |",
        (
            "| part1 | kernels | out of budget | 110 / 110 | paged_attention: 50-75% of a copy "
            "(goal 70%), SDPA/kernel 0.90-1.50x; rotary_embedding: not measured (goal 80%), "
            "1 wrong or failed |"
        ),
        (
            "| part1 | tests_kernels | failed | 70.5 / 75 | 7 passed, 1 failed, 2 skipped "
            "(tests.kernels.test_rotary::test_a) |"
        ),
        "| part1 | triton_cache | not run | 0 / 30 | no output |",
        (
            "| part2 | bench | ok | 100 / 120 | eager: right on 1/1; autofunc_v2: right on 1/2, "
            "-1 to +0 MiB above eager, 0.80-0.90x eager's time; builtin_v2: right on 1/1, "
            "-288 KiB above eager, 1.50x eager's time |"
        ),
        (
            "| part2 | compare | ok | 50 / 60 | eager: right on 1/1; builtin_v2: right on 1/2 "
            "(1 errors) |"
        ),
    ]


def test_readme_rows_replace_the_marked_block(tmp_path):
    parts = []
    for doc in MERGED:
        path = tmp_path / f"{doc['part']}.json"
        path.write_text(json.dumps(doc))
        parts.append(str(path))
    readme = tmp_path / "README.md"
    readme.write_text(f"# GPU\n\n{gc.ROWS_BEGIN}\n| old |\n{gc.ROWS_END}\n\nafter\n")
    assert gc.main(["--readme-rows", *parts, "--update", str(readme)]) == 0
    text = readme.read_text()
    assert "| old |" not in text and text.endswith(f"{gc.ROWS_END}\n\nafter\n")
    assert "\n".join(gc.readme_rows(MERGED)) in text
    with pytest.raises(ValueError, match="no .* block"):
        gc.update_rows("no markers", [])

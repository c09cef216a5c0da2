"""``autofunc bench`` / ``explain`` end to end on tiny sweeps: the JSON schema and the plot.

Never asserts timings.
"""

import json
import os

import pytest

from autofunc.bench.run import Record
from autofunc.bench.sweep import QUICK, STRATEGIES, Sweep
from autofunc.cli import main

ENV_FIELDS = {"device", "torch", "triton", "python", "commit"}
RECORD_FIELDS = set(Record.__dataclass_fields__)


def run_cli(tmp_path, *extra):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = [
        "bench",
        "--cases",
        "reshape_and_cache",
        "--sizes",
        "16x2",
        "--repeat",
        "2",
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
        *extra,
    ]
    assert main(argv) == 0
    return json.loads(out_json.read_text()), out_png


def test_bench_in_process_json_and_plot(tmp_path, capsys):
    doc, png = run_cli(tmp_path, "--strategies", "eager,autofunc_v2", "--in-process")
    assert doc["schema"] == "autofunc.bench/1"
    assert ENV_FIELDS <= set(doc["env"])
    assert doc["sweep"]["cases"] == ["reshape_and_cache"]
    records = doc["records"]
    assert [r["strategy"] for r in records] == ["eager", "autofunc_v2"]
    for r in records:
        assert RECORD_FIELDS | {"env"} <= set(r)
        assert ENV_FIELDS <= set(r["env"])
        assert r["x"] == {"cache_blocks": 16, "layers": 2}
        assert r["error"] == "" and r["correct"] is True
        assert r["cache_bytes"] == 2 * 2 * 16 * 16 * 2 * 16 * 4  # layers*2*blocks*bs*heads*dim*fp32
        assert r["time_ratio"] is not None and r["compile_s"] is not None
    v2 = records[1]
    assert v2["clones"] == 0 and v2["bytes_cloned"] == 0
    assert v2["mem_above_eager"] == 0  # the cache views are written in place
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "reshape_and_cache" in table and "autofunc_v2" in table
    assert table.strip().splitlines()[-1].startswith("verdict: autofunc_v2 is right on 1/1 points")


def test_verdict_compares_the_same_points():
    from autofunc.bench.report import verdict

    def rec(case, strategy, mem, correct=True, error=""):
        x = {"cache_blocks": 16, "layers": 2}
        return {"case": case, "x": x, "strategy": strategy, "mem_above_eager": mem,
                "correct": correct, "error": error}

    records = [
        rec("a", "builtin_v2", 100, correct=False),
        rec("a", "autofunc_v2", 0),
        rec("b", "builtin_v2", 0),
        rec("b", "autofunc_v2", 0),
        rec("c", "builtin_v2", None, correct=None, error="crash (signal 11)"),
        rec("c", "autofunc_v2", 8),
    ]
    assert verdict(records) == (
        "verdict: autofunc_v2 is right on 3/3 points, allocates less than builtin_v2 on 1 and "
        "more on 0; builtin_v2 is wrong or fails on 2"
    )


def test_bench_isolated_worker(tmp_path):
    # The default path: a worker subprocess forks a child per point; RSS is measured there.
    doc, _ = run_cli(tmp_path, "--strategies", "eager")
    (r,) = doc["records"]
    assert r["correct"] is True and r["error"] == ""
    assert r["rss_above_baseline"] is not None


def test_explain_cli(capsys):
    assert main(["explain", "autofunc.bench.cases:example_kv", "--backend", "aot_eager"]) == 0
    out = capsys.readouterr().out
    assert "reshape_and_cache" in out and "0 clone(s)" in out


def test_sweep_rejects_unknown_names():
    with pytest.raises(ValueError, match="builtin_v3"):
        QUICK.replace(lines=("eager", "builtin_v3"))
    with pytest.raises(ValueError, match="do not match"):
        Sweep("bad", x_names=("cache_blocks", "layers"), x_vals=((16,),))


def test_named_sweeps_are_data():
    assert set(QUICK.lines) == set(STRATEGIES)
    assert QUICK.config({"cache_blocks": 64, "layers": 2}).num_blocks == 64


def test_bench_compile_repeats_interleaved_with_medians(monkeypatch):
    # No compile here: the runner is replaced, to check the order of the runs (every point once,
    # then again, the cold compile only first) and that timings are medians.
    from autofunc.bench import compile_time as ct

    calls = []
    warm = iter([5.0, 1.0, 9.0, 3.0, 2.0, 8.0, 4.0, 6.0, 7.0, 1.5, 2.5, 3.5])

    def fake_run_one(config, layers, timeout_s, device, cache_dir, cold):
        calls.append((config, layers, cold))
        w = next(warm)
        return ct.CompileRecord(
            config, layers, hops=4 * layers, cold_s=10.0 if cold else None, warm_s=w,
            autofunc_pass_s=w / 10, builtin_reinplace_s=0.0, builtin_decompose_s=0.0,
            pass_gc_s=0.0, correct=True,
        )  # fmt: skip

    monkeypatch.setattr(ct, "_run_one", fake_run_one)
    records = ct.run([8, 16], progress=lambda _: None, repeat=3)
    assert calls == [
        (c, layers, rep == 0) for rep in range(3) for layers in (8, 16) for c in ct.CONFIGS
    ]
    by = {(r.config, r.layers): r for r in records}
    first = by[(ct.CONFIGS[0], 8)]  # warm 5.0, 2.0, 7.0
    assert (first.runs, first.warm_s, first.cold_s) == (3, 5.0, 10.0)
    assert first.autofunc_pass_s == 0.5
    assert by[(ct.CONFIGS[1], 16)].warm_s == 3.5  # 3.0, 6.0, 3.5


def test_bench_compile_a_failed_repetition_fails_the_point():
    from autofunc.bench.compile_time import CompileRecord, median_record

    ok = CompileRecord("autofunc_v2", 8, warm_s=1.0, correct=True)
    wrong = CompileRecord("autofunc_v2", 8, warm_s=2.0, correct=False)
    failed = CompileRecord("autofunc_v2", 8, error="warm: timeout (600 s)")
    assert median_record([ok, wrong]).correct is False
    assert median_record([ok, failed]).error == "warm: timeout (600 s)"


def test_compile_phases_are_disjoint_parts_of_dynamos_timers():
    from autofunc.bench.compile_timers import PHASES, phases_of

    metrics = {
        "_compile.compile_inner": [10.0],
        "OutputGraph.call_user_compiler": [7.0],
        "build_guards": [0.5],
        "compile_fx.<locals>.fw_compiler_base": [5.0],
        "_recursive_joint_graph_passes": [0.5],
        "_recursive_post_grad_passes": [1.0],
        "GraphLowering.run": [1.5],
        "GraphLowering.compile_to_module": [1.25, 0.25],  # two graphs: summed
    }
    phases = phases_of(metrics)
    assert tuple(phases) == PHASES
    assert phases == {
        "dynamo": 2.5, "guards": 0.5, "aot": 2.0, "joint": 0.5, "post_grad": 1.0,
        "lowering": 1.5, "codegen": 1.5, "inductor_other": 0.5,
    }  # fmt: skip
    assert sum(phases.values()) == 10.0
    # A timer another torch does not have leaves the phases that need it unknown, not wrong.
    del metrics["GraphLowering.run"]
    phases = phases_of(metrics)
    assert phases["lowering"] is None and phases["inductor_other"] is None
    assert phases["dynamo"] == 2.5


def test_gc_share_charges_each_object_left_four_times_the_mean_full_collection_per_heap_object():
    from autofunc.bench.compile_timers import gc_share

    # Full collections of 0.4 s and 0.6 s over a heap of 1e6 objects: 4 * 0.5 s / 1e6 per object.
    assert gc_share(1_000_000, 10_000, [0.4, 0.6]) == pytest.approx(0.02)
    assert gc_share(1_000_000, 10_000, []) == 0.0  # no full collection: nothing to share
    assert gc_share(1_000_000, -50, [0.5]) == 0.0  # a pass that freed more than it made
    assert gc_share(0, 10, [0.5]) == 0.0


def test_bench_compile_phase_table_and_medians_of_phases():
    from autofunc.bench.compile_time import CompileRecord, format_phases, median_record

    def rec(warm, dynamo):
        return CompileRecord(
            "autofunc_v2", 8, hops=32, warm_s=warm, autofunc_pass_s=0.032, pass_gc_s=0.016,
            pass_gc_share_s=0.0032, rule_s=0.2, gc_s=0.3, full_gcs=1, correct=True,
            phases={"dynamo": dynamo, "lowering": None},
        )  # fmt: skip

    med = median_record([rec(4.0, 0.3), rec(5.0, 0.5), rec(6.0, 0.4)])
    assert med.phases == {"dynamo": 0.4, "lowering": None}
    lines = format_phases([med]).splitlines()
    assert lines[0].split()[:4] == ["layers", "config", "warm", "s"]
    row = lines[2].split()
    assert row[:4] == ["8", "autofunc_v2", "5.0", "0.40"]
    # pass/hop: 16 ms without GC over 32 HOPs, + 3.2 ms of share, 32 ms with the GC inside
    assert row[-3:] == ["0.50", "0.60", "1.00"]


@pytest.mark.parametrize("config", ["autofunc_v2", "builtin_v2"])
def test_bench_compile_measures_a_real_compile(config):
    # One layer through Inductor in this process: every timer found its function on this torch.
    from autofunc.bench.compile_time import measure_compile
    from autofunc.bench.compile_timers import PHASES

    r = measure_compile(config, 1, "cpu", "warm")
    assert r.error == "" and r.correct is True
    assert r.hops == 4  # four mutable ops per layer, one HOP each
    assert r.pass_s is not None and r.pass_s > 0
    assert r.rule_s is not None and r.rule_s > 0
    assert r.gc_s is not None and r.full_gcs is not None and r.pass_gc_share_s is not None
    assert set(r.phases) == set(PHASES)
    assert all(v is not None and v >= 0 for v in r.phases.values()), r.phases
    assert sum(r.phases.values()) <= r.warm_s


def test_bench_json_holds_every_point_measured_so_far(tmp_path, monkeypatch):
    # A campaign step cut short by its time budget keeps the points it measured: the JSON is
    # rewritten after every point.
    from autofunc.bench import run

    seen = []
    real = run.measure_point

    def measure_and_look(*args, **kwargs):
        path = tmp_path / "bench.json"
        seen.append(len(json.loads(path.read_text())["records"]) if path.exists() else 0)
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "measure_point", measure_and_look)
    doc, _ = run_cli(tmp_path, "--strategies", "eager,autofunc_v2", "--in-process")
    assert seen == [0, 1]  # before the second point, the first was on disk
    assert len(doc["records"]) == 2


def test_gpu_campaign_dry_run(tmp_path):
    # tools/gpu_campaign.py --dry-run, both parts: each part's step budgets add up to at most
    # 300 s (one command of a 15-minute lease, with room to rerun it), at most 8 files come
    # back in all, and every step's arguments parse with its entry point's own parser (the
    # values too where a typo would only show on the GPU: strategies, sizes, kernels, configs).
    import subprocess
    import sys
    from pathlib import Path

    from autofunc.bench.configs import CONFIGS
    from autofunc.bench.kernel_cases import GOALS
    from autofunc.cli import _parser, _sizes
    from tools import gpu_campaign as gc

    assert set(gc.PARTS) == {"part1", "part2"}
    for part, steps in gc.PARTS.items():
        assert sum(s.budget_s for s in steps) <= 300, part
        assert len({s.name for s in steps}) == len(steps)
    assert gc.main(["part1", "--dry-run", str(tmp_path)]) == 0
    # the shell wrapper, as the GPU machine runs it
    script = Path(__file__).resolve().parent.parent / "scripts" / "gpu_campaign.sh"
    proc = subprocess.run(
        [str(script), "part2", "--dry-run", str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list(tmp_path.iterdir())) <= 8
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{part}{suffix}" for part in gc.PARTS for suffix in (".tsv", ".json", "-logs.tar.gz")
    )
    for part, steps in gc.PARTS.items():
        rows = [line.split("\t") for line in (tmp_path / f"{part}.tsv").read_text().splitlines()]
        assert rows[0] == ["step", "status", "rc", "seconds", "budget_s", "outputs"]
        assert [r[:3] for r in rows[1:]] == [[s.name, "parses", "0"] for s in steps]
        assert sum(int(r[4]) for r in rows[1:]) <= 300
        doc = json.loads((tmp_path / f"{part}.json").read_text())
        assert doc["dry_run"] and [s["status"] for s in doc["steps"]] == ["parses"] * len(steps)
    # values the parsers take as plain strings
    for step in (s for steps in gc.PARTS.values() for s in steps):
        if step.entry == "autofunc":
            args = _parser().parse_args(step.arguments(tmp_path))
            if args.command == "bench":
                assert set(args.strategies.split(",")) <= set(CONFIGS) and _sizes(args.sizes)
            if args.command == "bench-kernels":
                assert set(args.kernels.split(",")) <= set(GOALS)
        if step.entry == "compare":
            configs = step.argv[step.argv.index("--configs") + 1]
            assert set(configs.split(",")) <= set(CONFIGS)


def test_user_triton_case_on_cpu_is_measured_on_the_post_grad_graph(tmp_path):
    # The kernel writes kv[l, 0] and kv[l, 1] of every layer: PyTorch copies each written view
    # from element 0 of the cache, (L + 1) / 2 caches per step; autofunc writes the cache.
    out_json = tmp_path / "bench.json"
    argv = ["bench", "--cases", "user_triton", "--sizes", "16x2", "--in-process"]
    argv += ["--strategies", "eager,builtin_v2,autofunc_v2", "--json", str(out_json)]
    assert main(argv) == 0
    records = {r["strategy"]: r for r in json.loads(out_json.read_text())["records"]}
    assert all(r["error"] == "" and r["correct"] is True for r in records.values())
    cache = records["eager"]["cache_bytes"]
    assert records["builtin_v2"]["mem_above_eager"] == cache * 5 // 2
    assert records["autofunc_v2"]["mem_above_eager"] == 0
    assert records["autofunc_v2"]["clones"] == 0
    assert records["autofunc_v2"]["time_s"] is None  # nothing compiled runs on CPU

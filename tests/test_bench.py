"""``autofunc bench`` / ``explain`` end to end on tiny sweeps: the JSON schema and the plot.

Never asserts timings.
"""

import json

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

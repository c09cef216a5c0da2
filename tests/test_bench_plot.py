"""The bench plot's contract (``autofunc.bench.plot``): every size measured is a panel named by
its size, and every bar whose height cannot say its result carries a label the caption explains.
The labels are checked on the panels, not on pixels; one drawing checks that the PNG is written."""

import pytest

from autofunc.bench import plot
from autofunc.bench.plot import CAPTION, FAILURES

CACHE = 128 * 1024


def _record(case, strategy, x, mem, *, correct=True, error=""):
    return {
        "case": case, "strategy": strategy, "x": x, "cache_bytes": CACHE, "correct": correct,
        "error": error, "mem_above_eager": mem, "footprint_above_eager": None, "mismatch": [],
    }  # fmt: skip


SMALL, LARGE = {"cache_blocks": 16, "layers": 2}, {"cache_blocks": 64, "layers": 2}
ROWS = [
    _record("model", "eager", SMALL, 0),
    _record("model", "builtin_v2", SMALL, 4 * CACHE, correct=False),  # WRONG
    _record("model", "autofunc_v2", SMALL, 0),  # a zero
    _record("rotary", "eager", SMALL, 0),
    _record("rotary", "builtin_v2", SMALL, 3500),  # tiny next to the 4-cache bar: labelled
    _record("rotary", "autofunc_v2", SMALL, -200),  # less than eager
    _record("model", "eager", LARGE, 0),
    _record("model", "builtin_v2", LARGE, None, error="compile failed: boom"),
    _record("model", "autofunc_v2", LARGE, CACHE // 2),  # visible: its height says it
]


def _labels(panel):
    return {(b.case, b.strategy): (b.height, b.label) for b in panel.bars}


def test_every_size_is_a_panel_named_by_its_size():
    small, large = plot.panels(ROWS)
    assert (small.title, large.title) == ("cache_blocks=16, layers=2", "cache_blocks=64, layers=2")
    assert small.strategies == ("builtin_v2", "autofunc_v2")  # eager is the reference, no bar
    assert small.cases == ("model", "rotary") and large.cases == ("model",)


def test_bars_that_their_height_cannot_explain_are_labelled():
    small, large = plot.panels(ROWS)
    assert _labels(small) == {
        ("model", "builtin_v2"): (4.0, "WRONG"),
        ("model", "autofunc_v2"): (0.0, "0"),
        ("rotary", "builtin_v2"): (pytest.approx(3500 / CACHE), "3.4 KiB"),
        ("rotary", "autofunc_v2"): (0.0, "<0"),  # drawn as 0
    }
    assert _labels(large) == {
        ("model", "builtin_v2"): (0.0, "ERROR"),
        ("model", "autofunc_v2"): (0.5, ""),
    }
    assert small.top == pytest.approx(1.3 * 4) and large.top == 1.0


def test_the_caption_explains_every_label():
    for label in ("0:", "<0:", "KiB): a bar too short to see", "-: not measured", *FAILURES):
        assert label in CAPTION, label
    assert "cache" in CAPTION and "verdict" in CAPTION


def test_the_plot_is_drawn_from_the_json(tmp_path):
    pytest.importorskip("matplotlib")
    from autofunc.bench.report import write_json

    write_json(str(tmp_path / "b.json"), ROWS)
    plot.plot(str(tmp_path / "b.json"), str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"

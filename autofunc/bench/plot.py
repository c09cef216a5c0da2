"""The bench's bar chart, drawn from the JSON alone (``autofunc bench --plot``).

One panel per model size measured (``cache_blocks``/``layers``: small multiples, so every point
the verdict counts is drawn, and each panel names its size); in a panel, per case, one bar per
compiled strategy: its memory above eager in KV caches of that case at that size (so cases of
any size share one axis). No result is invisible: :func:`panels` gives every bar a label where
its height cannot say it (a zero, less than eager, a bar too short to see, a wrong result, a
failure) and :data:`CAPTION` explains every label. :func:`panels` is pure (the tests check the
labels); :func:`plot` only draws them, importing matplotlib (Agg) when called.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

from ..passes.report import format_bytes
from .report import memory_field, status, verdict

__all__ = ["CAPTION", "Bar", "Panel", "panels", "plot"]

# A bar shorter than this fraction of its panel's axis is labelled with its bytes.
TINY = 0.03

# Labels that say the bar's height is not the result: drawn bold, horizontal, in these colours.
FAILURES = {"WRONG": "tab:red", "ERROR": "darkviolet", "CRASH": "darkviolet"}

CAPTION = (
    "Bar: memory above eager in KV caches (1 = the case's whole cache at this size); {what}. "
    "0: the same as eager (drawn as a hairline); <0: less than eager (drawn as 0); "
    "a size (e.g. 3.4 KiB): a bar too short to see, its bytes; -: not measured; "
    "WRONG: the result differs from eager's; ERROR: compile or run failed, CRASH: its process "
    "died or timed out (no bar). Title: the verdict over every panel."
)


@dataclasses.dataclass(frozen=True)
class Bar:
    case: str
    strategy: str
    height: float  # in KV caches, >= 0 (what is drawn)
    label: str  # "" (the height says it), "0", "<0", a size, or a key of FAILURES


@dataclasses.dataclass(frozen=True)
class Panel:
    title: str  # the model size, e.g. "cache_blocks=16, layers=2"
    cases: tuple[str, ...]
    cache_bytes: dict[str, int]  # per case, its KV cache at this size
    strategies: tuple[str, ...]  # the compiled strategies, in the order of the records
    bars: tuple[Bar, ...]
    top: float  # the y axis's upper limit


def panels(rows: list[dict]) -> list[Panel]:
    """The records of one bench JSON (``doc["records"]``) as panels of labelled bars."""
    field = memory_field(rows)
    strategies = tuple(s for s in dict.fromkeys(r["strategy"] for r in rows) if s != "eager")
    sizes = list(dict.fromkeys(json.dumps(r["x"], sort_keys=False) for r in rows))
    out = []
    for size in sizes:
        here = [r for r in rows if json.dumps(r["x"], sort_keys=False) == size]
        cases = tuple(dict.fromkeys(r["case"] for r in here))
        cache = {c: max(r.get("cache_bytes") or 0 for r in here if r["case"] == c) for c in cases}
        measured = [
            (r, (r.get(field) or 0) / (cache[r["case"]] or 1))
            for r in here
            if r["strategy"] != "eager"
        ]
        top = max([1.0] + [1.3 * v for _, v in measured])
        bars = tuple(
            Bar(r["case"], r["strategy"], max(v, 0.0), _label(r, v, r.get(field), top))
            for r, v in measured
        )
        title = ", ".join(f"{k}={v}" for k, v in json.loads(size).items())
        out.append(Panel(title, cases, cache, strategies, bars, top))
    return out


def _label(r: dict, caches: float, nbytes: int | None, top: float) -> str:
    if status(r) != "ok":
        return status(r)
    if nbytes is None:
        return "-"
    if nbytes == 0:
        return "0"
    if nbytes < 0:
        return "<0"
    return format_bytes(nbytes) if caches < TINY * top else ""


def plot(json_path: str, png_path: str) -> None:
    """Draw :func:`panels` of the JSON at ``json_path`` (as :func:`report.write_json` writes it)
    into ``png_path``: the verdict as the title, :data:`CAPTION` below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(json_path) as f:
        doc = json.load(f)
    rows = doc["records"]
    drawn = panels(rows)
    n_cases = max((len(p.cases) for p in drawn), default=1)
    fig, axes = plt.subplots(  # at least one panel: a sweep with no point to draw says so
        max(1, len(drawn)), 1, figsize=(max(7.0, 1.7 * n_cases + 1.5), 2.9 * len(drawn) + 1.4),
        squeeze=False,
    )  # fmt: skip
    what = (
        "peak over the run (CUDA)"
        if memory_field(rows) == "footprint_above_eager"
        else "bytes one step allocates"
    )
    for ax, panel in zip(axes[:, 0], drawn):
        _draw(ax, panel, what)
    if drawn and drawn[0].strategies:  # an eager-only sweep has no bar to name
        axes[0, 0].legend(fontsize="small", ncol=len(drawn[0].strategies), loc="upper left")
    env = doc.get("env", {})
    fig.suptitle(
        f"autofunc bench, {env.get('device', '')}, torch {env.get('torch', '')}\n{verdict(rows)}",
        fontsize=8,
    )
    width_in = fig.get_size_inches()[0]
    caption = textwrap.fill(CAPTION.format(what=what), width=int(width_in * 15))
    fig.text(0.01, 0.01, caption, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, (caption.count("\n") + 2) * 0.12 / fig.get_size_inches()[1], 1, 1))
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


def _draw(ax, panel: Panel, what: str) -> None:
    width = 0.8 / max(1, len(panel.strategies))
    labelled: set[str] = set()
    group_top = {  # a case may have no bar (a sweep of eager alone)
        c: max((b.height for b in panel.bars if b.case == c), default=0) for c in panel.cases
    }
    for bar in panel.bars:
        i = panel.strategies.index(bar.strategy)
        j = panel.cases.index(bar.case)
        x = j + (i - (len(panel.strategies) - 1) / 2) * width
        legend = bar.strategy if bar.strategy not in labelled else None
        labelled.add(bar.strategy)
        ax.bar(x, bar.height, width, color=f"C{i}", label=legend)
        if bar.height == 0 and bar.label not in FAILURES:  # a zero is drawn, not left out
            ax.plot([x - width / 2, x + width / 2], [0, 0], color=f"C{i}", lw=3,
                    solid_capstyle="butt")  # fmt: skip
        if bar.label in FAILURES:
            # above the case's tallest bar, neighbours on alternate rows: the words never overlap
            y = group_top[bar.case] + panel.top * (0.03 + 0.07 * (i % 2))
            ax.text(x, y, bar.label, ha="center", va="bottom", fontsize=7, fontweight="bold",
                    color=FAILURES[bar.label])  # fmt: skip
        elif bar.label:
            wide = len(bar.label) > 2  # a size: upright would cover its neighbours
            ax.text(x, bar.height + panel.top * 0.01, bar.label, rotation=90 if wide else 0,
                    ha="center", va="bottom", fontsize=6)  # fmt: skip
    ax.set_xticks(range(len(panel.cases)))
    ax.set_xticklabels(
        [f"{c}\n({panel.cache_bytes[c] / 2**20:.2g} MiB cache)" for c in panel.cases], fontsize=7
    )
    ax.set_title(panel.title, fontsize=8, loc="left")
    ax.set_ylabel("above eager\n(KV caches)", fontsize=8)
    ax.set_ylim(0, panel.top)
    ax.grid(True, axis="y", alpha=0.3)

"""How benchmark results are presented: a table, a JSON file, and a plot drawn from that JSON.

Every record written carries :func:`~autofunc.bench.env.environment` (device, torch, triton,
python, git commit). ``plot`` reads only the JSON file, so a figure can always be redrawn from
the stored numbers. Imports matplotlib (Agg) only inside ``plot``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from ..passes.report import format_bytes
from .env import environment

__all__ = ["SCHEMA", "format_columns", "format_table", "plot", "write_json"]

SCHEMA = "autofunc.bench/1"


def _cell_bytes(n: int | None) -> str:
    return "-" if n is None else (format_bytes(n) if n >= 0 else "-" + format_bytes(-n))


def _cell(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else format(v, spec) + suffix


def _result(r: dict) -> str:
    if r["error"]:
        return "CRASH" if r["error"].startswith(("crash", "timeout")) else "ERROR"
    return "ok" if r["correct"] else "WRONG(" + ",".join(r.get("mismatch") or []) + ")"


def format_columns(header: list[str], body: list[list[str]]) -> list[str]:
    """Left-aligned columns two spaces apart: the header, a rule of dashes, one line per row."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in body)]


def format_table(records: Iterable[Any]) -> str:
    """One line per record (``Record`` objects or their dicts), grouped by case and sizes."""
    rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in records]
    x_names = list(dict.fromkeys(k for r in rows for k in r["x"]))
    header = [
        "case",
        *x_names,
        "cache",
        "strategy",
        "result",
        "clones",
        "cloned",
        "mem>eager",
        "run>eager",
        "time/eager",
        "compile",
        "rss>base",
    ]
    body = []
    for r in rows:
        body.append(
            [
                r["case"],
                *(str(r["x"].get(k, "")) for k in x_names),
                _cell_bytes(r["cache_bytes"] or None),
                r["strategy"],
                _result(r),
                _cell(r["clones"], "d"),
                _cell_bytes(r["bytes_cloned"]),
                _cell_bytes(r["mem_above_eager"]),
                _cell_bytes(r.get("footprint_above_eager")),
                _cell(r["time_ratio"], ".2f", "x"),
                _cell(r["compile_s"], ".1f", "s"),
                _cell_bytes(r["rss_above_baseline"]),
            ]
        )
    lines = format_columns(header, body)
    out = lines[:2]
    previous = None
    for row, text in zip(body, lines[2:]):
        group = row[: 1 + len(x_names)]
        if previous is not None and group != previous:
            out.append("")
        out.append(text)
        previous = group
    errors = [r for r in rows if r["error"]]
    out += [f"  {r['case']} {r['x']} {r['strategy']}: {r['error']}" for r in errors]
    out.append(
        "clones: autofunc's kept clones / the built-in's possibly-missed reinplacing count; "
        "mem>eager: bytes one call allocates (CPU) or its peak (CUDA) minus eager's, same process; "
        "run>eager (CUDA): peak bytes over the whole point (compile, CUDA graph pools, steps) minus "
        "the eager line's; "
        "time/eager: median step time ratio, same process; compile: first call; rss>base: peak "
        "RSS of the point's process minus one that only builds the inputs"
    )
    return "\n".join(out)


def write_json(path: str, records: Iterable[Any], sweep: Any = None, **extra: Any) -> dict:
    """Write ``{"schema", "env", "sweep", "records": [...]}``; every record carries ``env``."""
    env = environment()
    rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in records]
    doc = {
        "schema": SCHEMA,
        "env": env,
        "sweep": dataclasses.asdict(sweep) if dataclasses.is_dataclass(sweep) else sweep,
        **extra,
        "records": [{**r, "env": env} for r in rows],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return doc


def plot(json_path: str, png_path: str) -> None:
    """Memory above eager vs cache size, one line per strategy, one panel per case.

    Reads only ``json_path`` (as written by :func:`write_json`). Points that errored are left
    out; a wrong result is drawn hollow.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(json_path) as f:
        doc = json.load(f)
    # On CUDA the whole run's peak (CUDA graph pools included) is what a server must hold.
    field = (
        "footprint_above_eager"
        if any(r.get("footprint_above_eager") is not None for r in doc["records"])
        else "mem_above_eager"
    )
    records = [r for r in doc["records"] if r.get(field) is not None]
    case_names = list(dict.fromkeys(r["case"] for r in doc["records"]))
    strategies = list(dict.fromkeys(r["strategy"] for r in doc["records"]))
    modes = list(dict.fromkeys(r.get("mode") for r in doc["records"]))
    cols = min(3, max(1, len(case_names)))
    rows = (len(case_names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    # Distinct markers and dashes: strategies that tie (e.g. both v2s at 0) stay visible.
    styles = [("o", "-"), ("s", "--"), ("D", "-."), ("^", ":"), ("v", (0, (5, 1)))]
    for ax, case in zip(axes.flat, case_names):
        for i, strategy in enumerate(strategies):
            pts = sorted(
                (_cache_mib(r), r[field] / 2**20, bool(r["correct"]))
                for r in records
                if r["case"] == case and r["strategy"] == strategy
            )
            if not pts:
                continue
            xs, ys, _ok = zip(*pts)
            marker, dashes = styles[i % len(styles)]
            (line,) = ax.plot(
                xs,
                ys,
                marker=marker,
                linestyle=dashes,
                label=strategy,
                markersize=8 - i,
                alpha=0.85,
            )
            hollow = [(x, y) for x, y, good in pts if not good]
            if hollow:
                ax.scatter(*zip(*hollow), s=80, facecolors="none", edgecolors=line.get_color())
        ax.set_title(case + (f" (mode={modes[0]})" if len(modes) == 1 and modes[0] else ""))
        ax.set_xlabel("KV cache (MiB)")
        ax.set_ylabel(
            "peak over the run above eager (MiB)"
            if field == "footprint_above_eager"
            else "memory above eager (MiB)"
        )
        ax.set_yscale("symlog", linthresh=1e-3)
        sizes = [_cache_mib(r) for r in records if r["case"] == case and _cache_mib(r) > 0]
        if sizes and max(sizes) / min(sizes) > 8:
            ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(case_names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize="small")
    env = doc.get("env", {})
    fig.suptitle(
        f"autofunc bench: {env.get('device', '')}, torch {env.get('torch', '')} "
        f"(hollow: wrong result)",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


def _cache_mib(r: dict) -> float:
    return (r.get("cache_bytes") or 0) / 2**20

"""How benchmark results are presented: a table, a JSON file and the verdict (the plot, drawn
from that JSON alone, is ``bench.plot``).

Every record written carries :func:`~autofunc.bench.env.environment` (device, torch, triton,
python, git commit).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from ..passes.report import format_bytes
from .env import environment

__all__ = [
    "SCHEMA", "format_columns", "format_table", "memory_field", "status", "verdict", "write_json",
]  # fmt: skip

SCHEMA = "autofunc.bench/1"


def _cell_bytes(n: int | None) -> str:
    return "-" if n is None else (format_bytes(n) if n >= 0 else "-" + format_bytes(-n))


def _cell(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else format(v, spec) + suffix


def status(r: dict) -> str:
    """A record's outcome: ``ok``, ``WRONG`` (differs from eager), ``ERROR`` (compile or run
    failed) or ``CRASH`` (its process died or timed out)."""
    if r["error"]:
        return "CRASH" if r["error"].startswith(("crash", "timeout")) else "ERROR"
    return "ok" if r["correct"] else "WRONG"


def _result(r: dict) -> str:
    s = status(r)
    return s + "(" + ",".join(r.get("mismatch") or []) + ")" if s == "WRONG" else s


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


def verdict(records: Iterable[Any], ours: str = "autofunc_v2", theirs: str = "builtin_v2") -> str:
    """One line: where ``ours`` is right, and how its memory compares with ``theirs`` at the
    same points (bytes above eager: allocated on CPU, the run's peak on CUDA)."""
    rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in records]
    field = memory_field(rows)
    at = {(r["case"], json.dumps(r["x"], sort_keys=True), r["strategy"]): r for r in rows}
    points = sorted({(c, x) for c, x, s in at if s == ours})
    if not points:
        return f"verdict: no {ours} point was measured"
    right = sum(1 for c, x in points if _ok(at[(c, x, ours)]))
    wrong_theirs = sum(1 for c, x in points if (c, x, theirs) in at and not _ok(at[(c, x, theirs)]))
    less = more = 0
    for c, x in points:
        a, b = at[(c, x, ours)].get(field), at.get((c, x, theirs), {}).get(field)
        if a is not None and b is not None:
            less += a < b
            more += a > b
    return (
        f"verdict: {ours} is right on {right}/{len(points)} points, allocates less than {theirs} "
        f"on {less} and more on {more}; {theirs} is wrong or fails on {wrong_theirs}"
    )


def _ok(r: dict) -> bool:
    return not r.get("error") and bool(r.get("correct"))


def memory_field(rows: list[dict]) -> str:
    """The record field memory is compared on: the run's peak on CUDA, else per step."""
    # On CUDA the whole run's peak (CUDA graph pools included) is what a server must hold.
    if any(r.get("footprint_above_eager") is not None for r in rows):
        return "footprint_above_eager"
    return "mem_above_eager"

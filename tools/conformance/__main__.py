"""Run every conformance cell and write results/conformance.json plus a markdown table
(``tests/conformance`` runs the CI subset of the same cells).

A cell is (program, strategy, backend); strategies are autofunc v1/v2 and PyTorch's built-in
v1/v2 (ops not registered, ``enable_auto_functionalized_v2`` False/True). Cells run in this one
process, cheap backends first; results are written after every cell, and ``--resume`` skips
the cells already in the JSON file (e.g. after a crash).

    python -m tools.conformance [--backends aot_eager,export,inductor] [--programs a,b]
                                [--json results/conformance.json] [--md results/conformance.md]
                                [--resume]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import traceback
from pathlib import Path

# Triton kernels run under the interpreter on CPU: set before torch (and so Triton) is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parents[2]

import torch  # noqa: E402

from . import harness as H  # noqa: E402
from .programs import PROGRAMS  # noqa: E402

CELL_TIMEOUT_S = 600


class _CellTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _CellTimeout(f"cell ran past {CELL_TIMEOUT_S}s")


def _summary(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    text = type(e).__name__ + (": " + lines[0] if lines else "")
    # Dynamo wraps a backend's exception; the inner one says what went wrong.
    if "BackendCompilerFailed" in text and len(lines) > 1:
        text += " / " + lines[1]
    return text[:400]


def run_one(name: str, strategy: str, backend: str) -> dict:
    t0 = time.time()
    row = {"program": name, "suite": PROGRAMS[name].suite, "strategy": strategy,
           "backend": backend}
    signal.alarm(CELL_TIMEOUT_S)
    try:
        seen = H.run_cell(PROGRAMS[name], strategy, backend)
        row.update(ok=True, builtin_nodes=len(seen))
    except BaseException as e:  # noqa: BLE001 - a cell failure is data
        if isinstance(e, KeyboardInterrupt):
            raise
        row.update(ok=False, error=_summary(e), where=_where(e))
    finally:
        signal.alarm(0)
    row["seconds"] = round(time.time() - t0, 2)
    return row


def _where(e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/autofunc/" in f.filename]
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


def table(rows: list[dict]) -> str:
    """Per backend: passed/total for autofunc v1, v2 and the built-in v1, v2."""
    cols = ["autofunc_v1", "autofunc_v2", "builtin_v1", "builtin_v2"]
    out = ["| backend | autofunc v1 | autofunc v2 | built-in v1 | built-in v2 |",
           "|---|---|---|---|---|"]
    backends = [b for b in H.BACKENDS if any(r["backend"] == b for r in rows)]
    totals = {c: [0, 0] for c in cols}
    for b in backends:
        cells = []
        for c in cols:
            rs = [r for r in rows if r["backend"] == b and r["strategy"] == c]
            ok = sum(r["ok"] for r in rs)
            totals[c][0] += ok
            totals[c][1] += len(rs)
            cells.append(f"{ok}/{len(rs)}")
        out.append(f"| {b} | " + " | ".join(cells) + " |")
    out.append("| **all** | " + " | ".join(f"**{a}/{n}**" for a, n in totals.values()) + " |")
    return "\n".join(out)


def regressions(rows: list[dict]) -> list[str]:
    """Cells where the built-in (either version) passes and autofunc fails."""
    by = {(r["program"], r["strategy"], r["backend"]): r for r in rows}
    out = []
    for (p, s, b), r in sorted(by.items()):
        if s.startswith("autofunc") and not r["ok"]:
            builtin_ok = [
                v for v in ("builtin_v1", "builtin_v2") if by.get((p, v, b), {}).get("ok")
            ]
            if builtin_ok:
                passes = ", ".join(builtin_ok)
                out.append(f"{p} / {s} / {b}: {r['error']} (built-in passes: {passes})")
    return out


def wins(rows: list[dict]) -> list[str]:
    """Cells where autofunc passes and the built-in of the same version fails."""
    by = {(r["program"], r["strategy"], r["backend"]): r for r in rows}
    out = []
    for (p, s, b), r in sorted(by.items()):
        if s.startswith("builtin") and not r["ok"]:
            mine = by.get((p, s.replace("builtin", "autofunc"), b))
            if mine and mine["ok"]:
                out.append(f"{p} / {s} / {b}: {r['error']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m tools.conformance", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--backends", default="aot_eager,export,inductor")
    ap.add_argument("--strategies", default=",".join(H.STRATEGIES))
    ap.add_argument("--programs", default="")
    ap.add_argument("--json", default=str(ROOT / "results" / "conformance.json"))
    ap.add_argument("--md", default=str(ROOT / "results" / "conformance.md"))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="rewrite --md from --json")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _on_alarm)

    names = args.programs.split(",") if args.programs else list(PROGRAMS)
    path = Path(args.json)
    rows: list[dict] = []
    if (args.resume or args.report_only) and path.exists():
        rows = json.loads(path.read_text())["cells"]
    done = {(r["program"], r["strategy"], r["backend"]) for r in rows}

    def save() -> None:
        meta = {"torch": torch.__version__,
                "programs": len({r["program"] for r in rows}),
                "strategies": sorted({r["strategy"] for r in rows}),
                "backends": [b for b in H.BACKENDS if any(r["backend"] == b for r in rows)]}
        path.write_text(json.dumps({"meta": meta, "cells": rows}, indent=1) + "\n")
        md = [f"Conformance on torch {torch.__version__} (CPU): cells passed / run.", "",
              table(rows), ""]
        regs = regressions(rows)
        md += ["Cells where the built-in passes and autofunc fails:", ""]
        md += [f"- {r}" for r in regs] or ["- none"]
        md += ["", "Cells where the built-in fails and autofunc (same version) passes:", ""]
        md += [f"- {w}" for w in wins(rows)] or ["- none"]
        md += ["", "Failing cells:", ""]
        md += [f"- {r['program']} / {r['strategy']} / {r['backend']}: {r['error']}"
               for r in rows if not r["ok"]]
        Path(args.md).write_text("\n".join(md) + "\n")

    if args.report_only:
        save()
        print(table(rows))
        return
    for backend in args.backends.split(","):
        for name in names:
            for strategy in args.strategies.split(","):
                if backend not in PROGRAMS[name].backends or (name, strategy, backend) in done:
                    continue
                row = run_one(name, strategy, backend)
                rows.append(row)
                save()
                status = "ok" if row["ok"] else "FAIL " + row["error"][:150]
                print(f"{backend:9s} {strategy:12s} {name:45s} {row['seconds']:6.1f}s {status}",
                      flush=True)
    save()
    print(table(rows))


if __name__ == "__main__":
    main()

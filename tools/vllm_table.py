"""The vLLM table of results/README.md and the README, from ``examples/vllm_offline.py --json``
files: one row per run (configuration, compiled or not, tokens against eager, copy nodes and
their bytes in the graphs Inductor lowered, what autofunc's report says, compile + load time).

    python -m tools.vllm_table results/vllm/*.json [--update README.md results/README.md]

``--update`` replaces the table after the line ``<!-- vllm-table -->`` in each file (up to the
next blank line).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

_SETTING = {"0": "vLLM as it is", "1": "AUTOFUNC_VLLM=1 (PyTorch's nodes)",
            "register": "AUTOFUNC_VLLM=register (ops registered, v2)"}
_MODE = {"default": "default (whole-graph Inductor)", "vllm": "VLLM_COMPILE (pass manager)"}


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def table(paths: list[Path]) -> str:
    rows = ["| vLLM mode | setting | tokens = eager | copy nodes | copied | autofunc's report | compile + load |",
            "|---|---|---|---:|---:|---|---:|"]
    for path in sorted(paths):
        run = json.loads(path.read_text())
        cfg, compiled = run["config"], run["compiled"]
        copies = [c for graph in compiled["copies"] for c in graph]
        tail = [r.splitlines()[-1] for r in compiled["reports"]]
        calls = sum(int(re.match(r"(\d+) call", t).group(1)) for t in tail) if tail else 0
        clones = sum(int(re.search(r"(\d+) clone", t).group(1)) for t in tail) if tail else 0
        report = f"{calls} calls, {clones} clones" if tail else "-"
        rows.append(
            f"| {_MODE[cfg['compile_mode']]} | {_SETTING[cfg['autofunc']]} | "
            f"{'yes' if run['same_tokens'] else 'NO'} | {len(copies)} | "
            f"{_bytes(sum(b for _, b in copies))} | {report} | {compiled['init_s']:.0f} s |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--update", nargs="*", type=Path, default=[])
    args = parser.parse_args(argv)
    text = table(args.runs)
    print(text)
    for path in args.update:
        doc = path.read_text()
        marker = "<!-- vllm-table -->\n"
        head, _, rest = doc.partition(marker)
        if not _:
            raise SystemExit(f"{path}: no {marker.strip()} line")
        after = rest.split("\n\n", 1)[1] if rest.startswith("|") else rest.lstrip("\n")
        path.write_text(f"{head}{marker}{text}\n\n{after}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

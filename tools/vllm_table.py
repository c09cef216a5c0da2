"""The vLLM table of results/README.md and the README, from ``examples/vllm_offline.py --json``
files: one row per run, saying what it measured (vLLM's custom-op setting, the compile mode vLLM
ended up in and its graphs, autofunc's setting), what came out (tokens against eager, copy nodes
and their bytes in the graphs Inductor lowered, what autofunc's report says, compile + load
time), and the command that reproduces it. A line above the table names the settings every row
shares (the model, the token count the bytes are counted at).

    python -m tools.vllm_table results/vllm/*.json [--update README.md results/README.md]
    python -m tools.vllm_table --by-arch results/vllm-archs/*.json [--update results/README.md]

``--by-arch``: one row per architecture and setting (``examples/vllm_offline.py --arch``, the
ranks of ``--tp``), between the lines ``<!-- vllm-arch-table -->`` and its closing line.

``--update`` replaces what lies between the lines ``<!-- vllm-table -->`` and
``<!-- /vllm-table -->`` in each file (without the closing line: the table after the opening
one, up to the next blank line, and the closing line is added).
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from pathlib import Path

_SETTING = {"0": "vLLM alone", "1": "AUTOFUNC_VLLM=1 (PyTorch's nodes)",
            "register": "AUTOFUNC_VLLM=register (ops registered, v2)"}
# the compile mode vLLM ended up in (the runs before it was recorded: from what was asked)
_MODE = {
    "DYNAMO_TRACE_ONCE": "DYNAMO_TRACE_ONCE: one whole graph (vLLM's CPU default)",
    "VLLM_COMPILE": "VLLM_COMPILE: {graphs} pieces, pass manager "
                    "(AUTOFUNC_VLLM_FORCE_COMPILE=1)",
}
_ASKED = {"default": "DYNAMO_TRACE_ONCE", "vllm": "VLLM_COMPILE"}
_ROTARY = "+rotary_embedding"  # the example's default, and every run's before it was an option
_ORDER = {"0": 0, "1": 1, "register": 2}
START, END = "<!-- vllm-table -->\n", "<!-- /vllm-table -->\n"


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _custom_ops(cfg: dict) -> str:
    return cfg.get("custom_ops", _ROTARY)


def _command(cfg: dict) -> str:
    """The command that reproduces the run (the example sets AUTOFUNC_VLLM and
    AUTOFUNC_VLLM_FORCE_COMPILE for its runs from these options)."""
    parts = ["python examples/vllm_offline.py", f"--autofunc {cfg['autofunc']}"]
    if cfg["compile_mode"] != "default":
        parts.append(f"--compile-mode {cfg['compile_mode']}")
    if _custom_ops(cfg) != _ROTARY:
        parts.append(f"--custom-ops {_custom_ops(cfg)}")
    if cfg.get("arch", "llama") != "llama":
        parts.append(f"--arch {cfg['arch']}")
    if cfg.get("tp", 1) != 1:
        parts.append(f"--tp {cfg['tp']}")
    if cfg.get("mp"):
        parts.append("--mp")
    if cfg.get("no_reinplace"):
        parts.append("--no-reinplace")
    return " ".join(parts)


def _key(run: dict) -> tuple:
    cfg = run["config"]
    return (_custom_ops(cfg) == "default", cfg["compile_mode"] != "default",
            _ORDER.get(cfg["autofunc"], 9))


def _measured(run: dict) -> tuple[int, int, int, int, int, str]:
    """``(copy nodes, their bytes, calls, clones, reports, mode cell)`` of one run's compiled
    side: the copies of every lowered graph, the calls and clones autofunc's reports count."""
    cfg, compiled = run["config"], run["compiled"]
    copies = [c for graph in compiled["copies"] for c in graph]
    tail = [r.splitlines()[-1] for r in compiled["reports"]]
    calls = sum(int(re.match(r"(\d+) call", t).group(1)) for t in tail)
    clones = sum(int(re.search(r"(\d+) clone", t).group(1)) for t in tail)
    mode = compiled.get("vllm_mode", _ASKED[cfg["compile_mode"]])
    mode_cell = _MODE[mode].format(graphs=len(compiled["copies"]))
    return len(copies), sum(c[1] for c in copies), calls, clones, len(tail), mode_cell


def _row(run: dict) -> str:
    cfg, compiled = run["config"], run["compiled"]
    n, nbytes, calls, clones, reports, mode = _measured(run)
    report = f"{calls} calls, {clones} clones" if reports else "-"
    ops = _custom_ops(cfg)
    ops = "vLLM's default (`none`)" if ops == "default" else f"`{ops}`"
    return (
        f"| {ops} | {mode} | "
        f"{_SETTING[cfg['autofunc']]} | {'yes' if run['same_tokens'] else 'NO'} | "
        f"{n} | {_bytes(nbytes)} | {report} | "
        f"{compiled['init_s']:.0f} s | `{_command(cfg)}` |"
    )


def _settings(runs: list[dict]) -> str:
    tokens = sorted({r["compiled"].get("max_num_batched_tokens", 2048) for r in runs})
    lengths = sorted({r["config"]["tokens"] for r in runs})
    generated = sorted({r["config"]["max_tokens"] for r in runs})
    return textwrap.fill(
        "Every row: a tiny random Llama (hidden 128, 2 layers, float32; vLLM's own Llama code), "
        f"`max_model_len` {', '.join(map(str, lengths))}, 3 prompts, "
        f"{', '.join(map(str, generated))} greedy tokens each, compared with "
        "`enforce_eager=True`; copy nodes counted in every graph Inductor lowered, bytes at the "
        f"graphs' size hint of {', '.join(map(str, tokens))} tokens (vLLM's "
        "`max_num_batched_tokens`, its profile run). Custom ops: the `custom_ops` vLLM was given "
        "(its default on CPU when compiling is `none`: every vLLM CustomOp, the rotary among "
        "them, runs as plain torch code). Mode: the compile mode vLLM ran in.",
        width=96, break_on_hyphens=False,
    )


def table(paths: list[Path]) -> str:
    runs = sorted((json.loads(p.read_text()) for p in paths), key=_key)
    rows = ["| custom ops | vLLM mode | setting | tokens = eager | copy nodes | copied "
            "| autofunc's report | compile + load | command |",
            "|---|---|---|---|---:|---:|---|---:|---|"]
    rows += [_row(run) for run in runs]
    return _settings(runs) + "\n\n" + "\n".join(rows)


_ARCH = {"llama": "Llama", "qwen3": "Qwen3 (q/k norms)",
         "phi3": "Phi-3 (partial rotary, half of each head)",
         "mixtral": "Mixtral (4 experts, 2 a token)"}


def arch_table(paths: list[Path]) -> str:
    """One row per architecture, setting and rank count: vLLM alone beside autofunc."""
    runs = [json.loads(p.read_text()) for p in paths]
    runs.sort(key=lambda r: (list(_ARCH).index(r["config"].get("arch", "llama")),
                             r["config"].get("tp", 1), r["config"]["compile_mode"],
                             _ORDER.get(r["config"]["autofunc"], 9)))
    rows = ["| architecture | ranks | vLLM mode | setting | tokens = eager | copy nodes | copied "
            "| autofunc's report | compile + load | command |",
            "|---|---:|---|---|---|---:|---:|---|---:|---|"]
    for run in runs:
        cfg, compiled = run["config"], run["compiled"]
        n, nbytes, calls, clones, reports, mode = _measured(run)
        report = f"{calls} calls, {clones} clones ({reports} reports)" if reports else "-"
        rows.append(
            f"| {_ARCH[cfg.get('arch', 'llama')]} | {cfg.get('tp', 1)} | "
            f"{mode} | {_SETTING[cfg['autofunc']]} | "
            f"{'yes' if run['same_tokens'] else 'NO'} | {n} | "
            f"{_bytes(nbytes)} | {report} | {compiled['init_s']:.0f} s | "
            f"`{_command(cfg)}` |")
    return "\n".join(rows)


def update(path: Path, text: str, start: str = START, end: str = END) -> None:
    doc = path.read_text()
    head, found, rest = doc.partition(start)
    if not found:
        raise SystemExit(f"{path}: no {start.strip()} line")
    if end in rest:
        after = rest.split(end, 1)[1]
    else:  # the table alone, up to the next blank line
        after = rest.split("\n\n", 1)[1] if rest.startswith("|") else rest.lstrip("\n")
        after = "\n" + after
    path.write_text(f"{head}{start}{text}\n{end}{after}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--update", nargs="*", type=Path, default=[])
    parser.add_argument("--by-arch", action="store_true",
                        help="the per-architecture table (--arch, --tp runs)")
    args = parser.parse_args(argv)
    text = arch_table(args.runs) if args.by_arch else table(args.runs)
    print(text)
    for path in args.update:
        if args.by_arch:
            update(path, text, "<!-- vllm-arch-table -->\n", "<!-- /vllm-arch-table -->\n")
        else:
            update(path, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

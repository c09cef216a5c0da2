"""The GPU campaign in two parts, each one command sized to 15 minutes of GPU time.

    python -m tools.gpu_campaign part1|part2 OUTDIR [--dry-run]
    python -m tools.gpu_campaign --readme-rows MERGED.json [MERGED.json ...] [--update FILE]

(``scripts/gpu_campaign.sh`` is the same command.) The contract:

* **Steps are data** (``PARTS``): a name, an entry point (``ENTRY_POINTS``), its arguments, a
  budget in seconds and the files it writes. Each part's budgets add up to at most
  ``PART_BUDGET_S`` (a lease allows one command 10 minutes; a part that fails can be rerun).
* **Every step keeps its own budget.** It runs in its own process group; at ``budget_s -
  GRACE_S`` it gets SIGINT (pytest then writes its JUnit XML, the benchmarks have already
  written every point: their ``--json`` is rewritten as they go), at ``budget_s`` SIGKILL.
  Its status is ``ok``, ``failed`` (its exit status) or ``out of budget``; the next step runs.
* **Exactly ``FILES_PER_PART`` files come back per part**, all in OUTDIR and rewritten after
  every step (a command killed part-way still leaves them): ``<part>.tsv`` (one line per step),
  ``<part>.json`` (every step's status, command, log tail and parsed outputs) and
  ``<part>-logs.tar.gz`` (every log and raw output). Steps work in a scratch folder outside
  OUTDIR.
* ``--dry-run`` runs nothing: it checks that every step's arguments parse with its entry
  point's own parser and writes the same three files (CI: ``tests/test_bench.py``).
* ``--readme-rows`` renders merged JSONs as the Markdown rows of ``results/README.md``'s GPU
  table (``readme_rows``); ``--update FILE`` replaces the rows between ``ROWS_BEGIN`` and
  ``ROWS_END`` in FILE.

Exit status: 0 when every step was ``ok`` (dry run: every step parses), else 1; 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "ENTRY_POINTS",
    "FILES_PER_PART",
    "GRACE_S",
    "PARTS",
    "PART_BUDGET_S",
    "EntryPoint",
    "Step",
    "check_arguments",
    "main",
    "readme_rows",
    "run_part",
    "update_rows",
]

ROOT = Path(__file__).resolve().parent.parent
PART_BUDGET_S = 300  # one command of a lease (at most 600 s) with room to rerun a part
GRACE_S = 10  # between SIGINT and SIGKILL, inside the step's budget
FILES_PER_PART = 3  # <part>.tsv, <part>.json, <part>-logs.tar.gz
LOG_TAIL_CHARS = 3000
ROWS_BEGIN = "<!-- gpu-campaign rows: begin (python -m tools.gpu_campaign --readme-rows) -->"
ROWS_END = "<!-- gpu-campaign rows: end -->"


# -- entry points: how a step is started, and how its arguments are checked without running it --


def _check_autofunc(argv: list[str]) -> None:
    from autofunc.cli import _parser

    _parser().parse_args(argv)  # SystemExit(2) on an unknown option or a bad value


def _check_compare(argv: list[str]) -> None:
    from autofunc.bench.configs import CONFIGS
    from tools import corpus
    from tools.compare import _parser

    ns = _parser().parse_args(argv)
    unknown = [p for p in (ns.programs or "").split(",") if p and p not in corpus.PROGRAMS]
    unknown += [c for c in (ns.configs or "").split(",") if c and c not in CONFIGS]
    if unknown:
        raise ValueError(f"no such corpus program or configuration: {', '.join(unknown)}")


def _check_pytest(argv: list[str]) -> None:
    from _pytest.config import get_config

    # pytest's own parser with every built-in plugin's options (UsageError on an unknown one);
    # get_config() collects nothing, so this takes a second, not a collection's minute
    ns = get_config()._parser.parse(argv)
    missing = [p for p in ns.file_or_dir if not (ROOT / p.split("::")[0]).exists()]
    if missing:
        raise ValueError(f"no such test file: {', '.join(missing)}")


def _check_setup(argv: list[str]) -> None:
    if argv:
        raise ValueError(f"the set-up takes no arguments, got {argv}")
    subprocess.run(["bash", "-n", str(ROOT / "scripts/gpu_setup.sh")], check=True)


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """``command`` starts it (``{python}``: the campaign's interpreter); ``check(argv)``
    raises (or exits) when ``argv`` does not parse."""

    command: tuple[str, ...]
    check: Callable[[list[str]], None]


ENTRY_POINTS = {
    "setup": EntryPoint(("bash", "scripts/gpu_setup.sh"), _check_setup),
    "autofunc": EntryPoint(("{python}", "-m", "autofunc"), _check_autofunc),
    "compare": EntryPoint(("{python}", "-m", "tools.compare"), _check_compare),
    "pytest": EntryPoint(("{python}", "-m", "pytest"), _check_pytest),
}


@dataclasses.dataclass(frozen=True)
class Step:
    """One measurement: ``entry`` (a key of ``ENTRY_POINTS``) run with ``argv``, in which
    ``{work}`` is the scratch folder; ``outputs`` are the files it writes there (JSON or JUnit
    XML), merged into the part's JSON; ``summary`` names the ``SUMMARIES`` entry that turns
    them into a README row."""

    name: str
    entry: str
    argv: tuple[str, ...]
    budget_s: int
    outputs: tuple[str, ...] = ()
    summary: str = ""
    why: str = ""

    def __post_init__(self) -> None:
        if self.entry not in ENTRY_POINTS:
            raise ValueError(f"step {self.name}: no entry point {self.entry!r}")
        if self.budget_s <= GRACE_S:
            raise ValueError(f"step {self.name}: a budget of {self.budget_s}s leaves no run time")

    def arguments(self, work: Path) -> list[str]:
        return [a.replace("{work}", str(work)) for a in self.argv]

    def command(self, python: str, work: Path) -> list[str]:
        head = [python if a == "{python}" else a for a in ENTRY_POINTS[self.entry].command]
        return head + self.arguments(work)


def _pytest(name: str, budget_s: int, *paths: str, why: str) -> Step:
    argv = ("-q", "-rfE", "-p", "no:cacheprovider", *paths, "--junit-xml", f"{{work}}/{name}.xml")
    return Step(name, "pytest", argv, budget_s, (f"{name}.xml",), "junit", why)


def _autofunc(name: str, budget_s: int, *argv: str, summary: str, why: str) -> Step:
    return Step(
        name,
        "autofunc",
        (*argv, "--json", f"{{work}}/{name}.json"),
        budget_s,
        (f"{name}.json",),
        summary,
        why,
    )


SETUP = Step(
    "setup",
    "setup",
    (),
    25,
    ("env.txt",),
    "env",
    "install autofunc and the carried test wheels, no network; name the device",
)
# bench --gpu points: 32 layers, 512 KiB of KV cache per block (autofunc/bench/sweep.py, GPU).
# On the H200 (torch 2.11) an eager point took 4.5-5.5 s, autofunc_v2 and builtin_v2 12-16 s (a
# 9-12 s compile), so a part holds about three sizes of the three lines still in question.
SIZES = {"256 MiB": "512x32", "1 GiB": "2048x32", "4 GiB": "8192x32"}
LINES = "eager,autofunc_v2,builtin_v2"
# The corpus on CUDA: the programs whose memory a GPU changes (KV caches, fp8 and dtype views,
# rotary, one tensor twice). All 95 took over 35 s per line on the H200; these 19 about 60 s.
CUDA_PROGRAMS = (
    "kv_fp8_whole_layer,kv_fp8_layers,cache_same_dtype_view,kv_layers,kv_reordered_read,"
    "qkv_split,rope_in_place,sglang_rope_inplace,sglang_rope_set_kv,shared_storage_layers,"
    "fp8_norm_quant_chain,out_buffer_chain,cache_put_own_rows,dst_src_clone,same_twice,"
    "kv_returned_copy,copy_then_call,bits_dtype_view,dtype_view_bases_meet"
)

PARTS: dict[str, tuple[Step, ...]] = {
    # Part 1: set-up, kernel bandwidth, correctness under real code generation, bench-triton
    # (on the H200: setup 11 s, kernels 31 s, the kernel tests 65 s, the GPU Triton tests 24 s)
    "part1": (
        SETUP,
        _autofunc(
            "kernels",
            50,
            "bench-kernels",
            "--kernels",
            "reshape_and_cache,rotary_embedding,paged_attention",
            "--max-gib",
            "8",
            summary="kernels",
            why="the restructured paged decode attention (goal 70% of a copy; SDPA beside "
            "it), reshape_and_cache and rotary (goal 80%); RMSNorm met its goal",
        ),
        _pytest(
            "tests_triton_cuda",
            45,
            "tests/test_triton_kernels.py",
            "-k",
            "cuda",
            why="user Triton kernels under Inductor's GPU code generation",
        ),
        _pytest(
            "tests_kernels",
            95,
            "tests/kernels",
            why="the kernels compiled (TRITON_INTERPRET=0), fp32/fp16/bf16",
        ),
        _autofunc(
            "triton_cache",
            85,
            "bench-triton",
            "--device",
            "cuda",
            "--layers",
            "2,32",
            summary="triton_cache",
            why="user Triton kernels writing kv[l], measured (2 layers took about 20 s)",
        ),
    ),
    # Part 2: bench --gpu in default and CUDA-graphs modes, the corpus on CUDA
    "part2": (
        SETUP,
        _autofunc(
            "bench",
            95,
            "bench",
            "--gpu",
            "--strategies",
            LINES,
            "--sizes",
            f"{SIZES['1 GiB']},{SIZES['4 GiB']}",
            summary="bench",
            why="bench --gpu, default mode, 1 GiB and 4 GiB of KV cache (256 MiB: measured)",
        ),
        _autofunc(
            "bench_cg",
            55,
            "bench",
            "--gpu",
            "--mode",
            "reduce-overhead",
            "--strategies",
            LINES,
            "--sizes",
            SIZES["4 GiB"],
            summary="bench",
            why="the same under CUDA graphs, 4 GiB (256 MiB: measured)",
        ),
        Step(
            "compare",
            "compare",
            (
                "--device",
                "cuda",
                "--programs",
                CUDA_PROGRAMS,
                "--configs",
                LINES,
                "--json",
                "{work}/compare.json",
            ),
            125,
            ("compare.json",),
            "compare",
            "the corpus's CUDA programs under eager, autofunc v2 and the built-in v2",
        ),
    ),
}


# -- running ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    step: Step
    status: str = "not run"  # ok, failed, out of budget, parses, parse error
    rc: int | None = None
    seconds: float = 0.0
    detail: str = ""  # a dry run's parse error


def check_arguments(step: Step) -> str:
    """``""`` when the step's arguments parse with its entry point's parser, else why not."""
    err = io.StringIO()
    old = sys.stderr
    sys.stderr = err  # argparse prints its error before it exits
    try:
        ENTRY_POINTS[step.entry].check(step.arguments(Path("WORK")))
    except SystemExit as e:
        return err.getvalue().strip() or f"exit {e.code}"
    except Exception as e:  # noqa: BLE001 - any failure to parse is the answer
        return f"{type(e).__name__}: {e}".strip()
    finally:
        sys.stderr = old
    return ""


def _run(step: Step, python: str, work: Path, env: dict[str, str]) -> Result:
    result = Result(step)
    t0 = time.monotonic()
    with open(work / f"{step.name}.log", "w") as log:
        proc = subprocess.Popen(
            step.command(python, work),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        try:
            result.rc = proc.wait(timeout=step.budget_s - GRACE_S)
        except subprocess.TimeoutExpired:
            result.status = "out of budget"
            os.killpg(proc.pid, signal.SIGINT)
            try:
                result.rc = proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                result.rc = proc.wait()
    result.seconds = round(time.monotonic() - t0, 1)
    if result.status == "not run":
        result.status = "ok" if result.rc == 0 else "failed"
    return result


def _read_output(path: Path) -> Any:
    """A JSON file as its value, JUnit XML as its counts and failed tests, else its text."""
    if not path.exists():
        return None
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        if path.suffix == ".xml":
            return _junit(path)
    except (ValueError, ET.ParseError) as e:  # a file cut short by SIGKILL
        return {"unreadable": f"{type(e).__name__}: {e}"}
    return path.read_text(errors="replace")


def _junit(path: Path) -> dict[str, Any]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {
        k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")
    }
    failed = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in root.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    return {
        **counts,
        "passed": counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
        "failed": failed,
    }


def _write(out: Path, part: str, results: list[Result], work: Path, dry_run: bool) -> None:
    """The part's three files, each replaced whole (a kill leaves the previous version)."""

    def put(name: str, data: bytes) -> None:
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, out / name)

    rows = ["step\tstatus\trc\tseconds\tbudget_s\toutputs"]
    steps = []
    for r in results:
        found = [o for o in r.step.outputs if (work / o).exists()]
        rows.append(
            f"{r.step.name}\t{r.status}\t{'' if r.rc is None else r.rc}\t{r.seconds:g}"
            f"\t{r.step.budget_s}\t{','.join(found)}"
        )
        log = work / f"{r.step.name}.log"
        steps.append(
            {
                "name": r.step.name,
                "status": r.status,
                "rc": r.rc,
                "seconds": r.seconds,
                "budget_s": r.step.budget_s,
                "summary": r.step.summary,
                "why": r.step.why,
                "command": r.step.command("python", Path("WORK")),
                "detail": r.detail,
                "log_tail": log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
                if log.exists()
                else "",
                "outputs": {o: _read_output(work / o) for o in r.step.outputs},
            }
        )
    doc = {
        "part": part,
        "dry_run": dry_run,
        "commit": _commit(),
        "budget_s": sum(s.budget_s for s in PARTS[part]),
        "steps": steps,
    }
    put(f"{part}.tsv", ("\n".join(rows) + "\n").encode())
    put(f"{part}.json", json.dumps(doc, indent=1).encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(work, arcname=f"{part}-logs")
    put(f"{part}-logs.tar.gz", buf.getvalue())


def _commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or "unknown"


def run_part(part: str, out: Path, dry_run: bool = False, python: str = sys.executable) -> int:
    """Run (or, dry, check) ``PARTS[part]`` in order in a scratch folder (removed at the end:
    the archive holds its files), writing OUTDIR's three files after every step; returns the
    exit status of the module docstring."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"gpu-campaign-{part}-") as scratch:
        return _run_part(part, out, Path(scratch), dry_run, python)


def _run_part(part: str, out: Path, work: Path, dry_run: bool, python: str) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "0", "OUT": str(work)}
    results = [Result(s) for s in PARTS[part]]  # "not run" until their turn
    for i, step in enumerate(PARTS[part]):
        if dry_run:
            detail = check_arguments(step)
            results[i] = Result(
                step, "parse error" if detail else "parses", 2 if detail else 0, detail=detail
            )
            (work / f"{step.name}.log").write_text(detail)
        else:
            print(f"[{part}] {step.name} (budget {step.budget_s}s)", flush=True)
            results[i] = r = _run(step, python, work, env)
            print(f"[{part}] {step.name}: {r.status}, exit {r.rc}, {r.seconds:g}s", flush=True)
        _write(out, part, results, work, dry_run)
    print((out / f"{part}.tsv").read_text(), end="")
    good = "parses" if dry_run else "ok"
    return 0 if all(r.status == good for r in results) else 1


# -- the README's rows ------------------------------------------------------------------------


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    if format(lo, fmt) == format(hi, fmt):
        return format(lo, fmt)
    return f"{format(lo, fmt)}{' to ' if lo < 0 else '-'}{format(hi, fmt)}"


def _bytes_span(values: list[int]) -> str:
    """In MiB where one of them reaches a MiB, else in KiB (a per-call peak is often KiB)."""
    unit, scale = ("MiB", 2**20) if max(abs(v) for v in values) >= 2**20 else ("KiB", 2**10)
    return f"{_span([v / scale for v in values], '+.0f')} {unit}"


def _kernels(outputs: dict[str, Any]) -> str:
    doc = next(iter(outputs.values())) or {}
    parts = []
    for kernel in dict.fromkeys(r["kernel"] for r in doc.get("records", [])):
        rows = [r for r in doc["records"] if r["kernel"] == kernel]
        fr = [r["fraction"] * 100 for r in rows if r.get("fraction") is not None]
        text = f"{kernel}: {_span(fr, '.0f')}% of a copy" if fr else f"{kernel}: not measured"
        text += f" (goal {rows[0]['goal'] * 100:.0f}%)"
        sdpa = [r["sdpa_speedup"] for r in rows if r.get("sdpa_speedup") is not None]
        if sdpa:
            text += f", SDPA/kernel {_span(sdpa, '.2f')}x"
        wrong = sum(1 for r in rows if r.get("checked") is False or r.get("error"))
        parts.append(text + (f", {wrong} wrong or failed" if wrong else ""))
    return "; ".join(parts)


def _bench(outputs: dict[str, Any]) -> str:
    doc = next(iter(outputs.values())) or {}
    records = doc.get("records", [])
    parts = []
    for strategy in dict.fromkeys(r["strategy"] for r in records):
        rows = [r for r in records if r["strategy"] == strategy]
        right = sum(1 for r in rows if r.get("correct") and not r.get("error"))
        text = f"{strategy}: right on {right}/{len(rows)}"
        mem = [r["mem_above_eager"] for r in rows if r.get("mem_above_eager") is not None]
        if mem and strategy != "eager":
            text += f", {_bytes_span(mem)} above eager"
        t = [r["time_ratio"] for r in rows if r.get("time_ratio") is not None]
        if t and strategy != "eager":
            text += f", {_span(t, '.2f')}x eager's time"
        parts.append(text)
    return "; ".join(parts)


def _compare(outputs: dict[str, Any]) -> str:
    doc = next(iter(outputs.values())) or {}
    rows = doc.get("rows", [])
    parts = []
    for config in dict.fromkeys(r["config"] for r in rows):
        mine = [r for r in rows if r["config"] == config]
        right = sum(1 for r in mine if r.get("correct") and not r.get("error"))
        failed = sum(1 for r in mine if r.get("error"))
        parts.append(
            f"{config}: right on {right}/{len(mine)}" + (f" ({failed} errors)" if failed else "")
        )
    return "; ".join(parts)


def _junit_row(outputs: dict[str, Any]) -> str:
    doc = next(iter(outputs.values())) or {}
    if "tests" not in doc:
        return "no JUnit XML"
    text = (
        f"{doc['passed']} passed, {doc['failures'] + doc['errors']} failed, "
        f"{doc['skipped']} skipped"
    )
    return text + (
        f" ({', '.join(doc['failed'][:3])}{', ...' if len(doc['failed']) > 3 else ''})"
        if doc["failed"]
        else ""
    )


def _triton_cache(outputs: dict[str, Any]) -> str:
    doc = next(iter(outputs.values())) or {}
    return "; ".join(
        f"{r['layers']} layers: built-in {r['builtin_bytes'] / r['cache_bytes']:.1f} caches, "
        f"autofunc {r['autofunc_bytes']} B"
        for r in doc.get("rows", [])
    )


def _env(outputs: dict[str, Any]) -> str:
    text = next(iter(outputs.values())) or ""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "env": _env,
    "kernels": _kernels,
    "bench": _bench,
    "compare": _compare,
    "junit": _junit_row,
    "triton_cache": _triton_cache,
}


def readme_rows(docs: list[dict[str, Any]]) -> list[str]:
    """Markdown table rows (header included) of merged part JSONs: one row per step, with its
    status, time against its budget and what it measured."""
    rows = ["| part | step | status | s / budget | result |", "|---|---|---|---:|---|"]
    for doc in docs:
        for s in doc["steps"]:
            summarize = SUMMARIES.get(s["summary"])
            result = summarize(s["outputs"]) if summarize and any(s["outputs"].values()) else ""
            result = result or (s["detail"] or "no output")
            rows.append(
                f"| {doc['part']} | {s['name']} | {s['status']} | "
                f"{s['seconds']:g} / {s['budget_s']} | {result.replace('|', '/')} |"
            )
    return rows


def update_rows(text: str, rows: list[str]) -> str:
    """``text`` with the lines between ``ROWS_BEGIN`` and ``ROWS_END`` replaced by ``rows``."""
    head, begin, rest = text.partition(ROWS_BEGIN)
    _, end, tail = rest.partition(ROWS_END)
    if not begin or not end:
        raise ValueError(f"no {ROWS_BEGIN} ... {ROWS_END} block")
    return head + begin + "\n" + "\n".join(rows) + "\n" + end + tail


# -- command line -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tools.gpu_campaign", description=__doc__.splitlines()[0]
    )
    ap.add_argument("part", nargs="?", choices=tuple(PARTS))
    ap.add_argument("outdir", nargs="?", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="check every step's arguments only")
    ap.add_argument(
        "--readme-rows",
        nargs="+",
        type=Path,
        metavar="MERGED_JSON",
        help="print the README rows of these <part>.json files",
    )
    ap.add_argument(
        "--update", type=Path, metavar="FILE", help="with --readme-rows: replace the rows in FILE"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_intermixed_args(argv)  # part1 --dry-run OUTDIR
    if args.readme_rows:
        if args.part or args.dry_run:
            ap.error("--readme-rows takes no part")
        rows = readme_rows([json.loads(p.read_text()) for p in args.readme_rows])
        if args.update:
            args.update.write_text(update_rows(args.update.read_text(), rows))
        else:
            print("\n".join(rows))
        return 0
    if not (args.part and args.outdir) or args.update:
        ap.error("give a part and OUTDIR (or --readme-rows)")
    return run_part(args.part, args.outdir, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())

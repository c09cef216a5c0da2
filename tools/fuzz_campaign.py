"""A fuzzing campaign: ``tools.fuzz_sweep`` over a range of programs, in chunks, one process each.

    python -m tools.fuzz_campaign --seed 20261123 --count 1000 --paths capture \\
        --strategies v1,v2 --chunk 100 --json results/fuzz-capture.json

A chunk runs in its own process, so a crash (a segfault or a double free in compiled code) loses
that chunk's count, not the campaign: the crashed chunk is recorded with its exit status and
rerun one program per process to name the program that crashes. The merged summary (per
strategy/path checks, failures, PyTorch limitations, crashes; on the paths of
``--against-builtin``, each result next to the built-in v2's and the bytes every configuration
allocates per program, and the shrunk failures) goes to ``--json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def _run(args: argparse.Namespace, start: int, count: int, out: Path) -> tuple[int, dict | None]:
    cmd = [
        sys.executable, "-m", "tools.fuzz_sweep", "--seed", str(args.seed), "--start", str(start),
        "--count", str(count), "--paths", args.paths, "--strategies", args.strategies,
        "--out", args.out, "--json", str(out),
        "--against-builtin", args.against_builtin, "--shrink-checks", str(args.shrink_checks),
        "--shrink-limit", str(args.shrink_limit),
        "--shrink-limit-mismatch", str(args.shrink_limit_mismatch),
    ] + (["--no-shrink"] if args.no_shrink else []) + (
        [f"--features={args.features}"] if args.features else []  # "-name" is not an option
    )
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL if args.quiet else None).returncode
    data = json.loads(out.read_text()) if out.exists() else None
    return rc, data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz_campaign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--paths", default="capture")
    ap.add_argument("--strategies", default="v1,v2")
    ap.add_argument("--out", default="fuzz-failures")
    ap.add_argument("--json", required=True)
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--features", default="", help="passed to tools.fuzz_sweep --features")
    ap.add_argument("--against-builtin", default="inductor",
                    help="passed to tools.fuzz_sweep --against-builtin")
    ap.add_argument("--shrink-checks", type=int, default=300,
                    help="passed to tools.fuzz_sweep --shrink-checks")
    ap.add_argument("--shrink-limit", type=int, default=3,
                    help="passed to tools.fuzz_sweep --shrink-limit (per chunk)")
    ap.add_argument("--shrink-limit-mismatch", type=int, default=10,
                    help="passed to tools.fuzz_sweep --shrink-limit-mismatch (per chunk)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    stats: dict = collections.defaultdict(lambda: collections.Counter())
    failures: list[str] = []
    crashes: list[dict] = []
    extra: dict = {"allocated": {}, "shrunk": []}
    seconds = 0.0
    torch_version = None
    with tempfile.TemporaryDirectory() as tmp:
        for start in range(args.start, args.start + args.count, args.chunk):
            count = min(args.chunk, args.start + args.count - start)
            rc, data = _run(args, start, count, Path(tmp) / f"{start}.json")
            if data is None:  # the process died: find the program, count the rest
                crashes.append({"start": start, "count": count, "returncode": rc})
                for index in range(start, start + count):
                    rc1, one = _run(args, index, 1, Path(tmp) / f"{index}-1.json")
                    if one is None:
                        crashes.append({"program": index, "returncode": rc1})
                        continue
                    _merge(stats, failures, one, extra)
                    seconds += one["seconds"]
                continue
            _merge(stats, failures, data, extra)
            seconds += data["seconds"]
            torch_version = data.get("torch")
            print(f"[{start + count - args.start}/{args.count}] failures={len(failures)} "
                  f"crashes={len(crashes)}", flush=True)
    summary = {
        "seed": args.seed, "start": args.start, "count": args.count, "paths": args.paths,
        "strategies": args.strategies, "features": args.features, "torch": torch_version,
        "seconds": round(seconds, 1),
        "stats": {k: dict(v) for k, v in sorted(stats.items())},
        "failures": failures, "crashes": crashes, "against_builtin": args.against_builtin,
        **extra,
    }
    Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    for key, st in sorted(stats.items()):
        print(f"  {key:20s} {st['checks']:5d} checks  {st['bugs']:3d} failures  "
              f"{st['limitations']:3d} PyTorch limitations")
    print(f"{len(failures)} failures, {len(crashes)} crashes -> {args.json}")
    return 1 if failures or crashes else 0


def _merge(stats: dict, failures: list, data: dict, extra: dict) -> None:
    for key, st in data["stats"].items():
        stats[key].update({k: v for k, v in st.items() if k != "time"})
    failures.extend(data["failures"])
    extra["allocated"].update(data.get("allocated", {}))
    extra["shrunk"].extend(data.get("shrunk", []))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Differential fuzzing sweep: random programs with mutable custom ops, eager vs. compiled.

    python scripts/fuzz_sweep.py --seed 0 --count 500 --paths capture,inductor \\
        --strategies v1,v2 --out fuzz-failures/ --max-per-path inductor=20

Every failure is shrunk to a minimal program (up to --shrink-limit per kind of failure),
triaged (the same program on the other strategies, PyTorch's builtin handling included, and on
aot_eager / capture) and saved as a runnable ``fuzz_repro_<hash>.py`` in --out. Exits 1 if any
program failed (PyTorch limitations, see ``fuzz.LIMITATIONS``, are counted but do not fail).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from autofunc.bench import fuzz


def _parse_limits(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, text.split(",")):
        path, _, n = item.partition("=")
        out[path.strip()] = int(n)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=500, help="programs to generate")
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--paths", default="capture,inductor", help=f"comma-separated, of {fuzz.PATHS}")
    ap.add_argument("--strategies", default="v1,v2", help=f"comma-separated, of {fuzz.STRATEGIES}")
    ap.add_argument("--max-per-path", default="", metavar="PATH=N,...",
                    help="run PATH on the first N programs only (e.g. inductor=20)")
    ap.add_argument("--size", type=int, default=None, help="statements per program (default: random 4-22)")
    ap.add_argument("--out", default="fuzz-failures", help="directory for minimal reproducers")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-limit", type=int, default=3,
                    help="failures shrunk per (strategy, path, kind of failure); the rest are counted")
    ap.add_argument("--shrink-checks", type=int, default=300, help="compiles per shrink at most")
    ap.add_argument("--no-triage", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per program")
    args = ap.parse_args(argv)

    paths = [p for p in args.paths.split(",") if p]
    strategies = [s for s in args.strategies.split(",") if s]
    for p in paths:
        if p not in fuzz.PATHS:
            ap.error(f"unknown path {p!r}")
    for s in strategies:
        if s not in fuzz.STRATEGIES:
            ap.error(f"unknown strategy {s!r}")
    limits = _parse_limits(args.max_per_path)

    stats = collections.defaultdict(lambda: {"checks": 0, "time": 0.0, "bugs": 0, "limitations": 0})
    shrunk = collections.Counter()
    repros: dict[str, str] = {}  # file -> one-line description
    failed_programs: list[str] = []
    eager_errors = 0
    t_start = time.time()
    interactive = sys.stdout.isatty()

    def log(msg: str) -> None:
        if interactive:
            print("\r\033[K", end="")
        print(msg, flush=True)

    try:
        for k, index in enumerate(range(args.start, args.start + args.count)):
            program = fuzz.program_for(args.seed, index, args.size)
            line = []
            for path in paths:
                if path in limits and k >= limits[path]:
                    continue
                for strategy in strategies:
                    key = f"{strategy}/{path}"
                    t0 = time.perf_counter()
                    try:
                        failure = fuzz.check(program, strategy, path)
                    except fuzz.EagerError:
                        eager_errors += 1
                        continue
                    st = stats[key]
                    st["checks"] += 1
                    st["time"] += time.perf_counter() - t0
                    if failure is None:
                        line.append(f"{key} ok")
                        continue
                    if not failure.is_bug:
                        st["limitations"] += 1
                        line.append(f"{key} limitation")
                        continue
                    st["bugs"] += 1
                    line.append(f"{key} FAIL")
                    failed_programs.append(f"{program.origin} {key}: {failure.kind}: {failure.message[:120]}")
                    log(f"FAIL {program.origin} {key}: {failure.kind}: {failure.message[:160]}")
                    sig = (strategy, path, failure.signature)
                    if args.no_shrink or shrunk[sig] >= args.shrink_limit:
                        if args.no_shrink:
                            f = fuzz.write_repro(failure, args.out)
                            repros.setdefault(str(f), f"{key} {failure.kind}: {failure.message[:100]}")
                        continue
                    shrunk[sig] += 1
                    t1 = time.perf_counter()
                    small = fuzz.shrink_failure(failure, max_checks=args.shrink_checks)
                    tri = None if args.no_triage else fuzz.triage(small.program)
                    f = fuzz.write_repro(small, args.out, tri)
                    new = str(f) not in repros
                    repros.setdefault(str(f), f"{key} {small.kind}: {small.message[:100]}")
                    log(f"     shrunk {len(program.stmts)} -> {len(small.program.stmts)} statements in "
                        f"{time.perf_counter() - t1:.1f}s -> {f}{'' if new else ' (seen before)'}")
            if args.verbose:
                log(f"[{k + 1}/{args.count}] {program.origin}: " + ", ".join(line))
            elif interactive:
                print(f"\r[{k + 1}/{args.count}] {time.time() - t_start:.0f}s "
                      f"failures={len(failed_programs)}", end="", flush=True)
            elif (k + 1) % 25 == 0:
                log(f"[{k + 1}/{args.count}] {time.time() - t_start:.0f}s failures={len(failed_programs)}")
    except KeyboardInterrupt:
        log("interrupted")

    if interactive:
        print()
    print(f"\n== fuzz sweep: seed={args.seed}, {args.count} programs, {time.time() - t_start:.0f}s total")
    for key, st in sorted(stats.items()):
        n = st["checks"]
        print(f"  {key:20s} {n:5d} checks  {st['time'] / max(n, 1):6.2f}s/check  "
              f"{st['bugs']:3d} failures  {st['limitations']:3d} PyTorch limitations")
    if eager_errors:
        print(f"  {eager_errors} programs raised in eager (skipped)")
    if repros:
        print(f"\n{len(repros)} minimal reproducers in {args.out}:")
        for f, desc in repros.items():
            print(f"  {f}: {desc}")
    bugs = sum(st["bugs"] for st in stats.values())
    print(f"\n{bugs} failing checks" + (":" if bugs else ""))
    for line in failed_programs[:50]:
        print("  " + line)
    if len(failed_programs) > 50:
        print(f"  ... and {len(failed_programs) - 50} more")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())

"""Differential fuzzing sweep: random programs with mutable custom ops, eager vs. compiled.

    python -m tools.fuzz_sweep --seed 0 --count 500 --paths capture,inductor \\
        --strategies v1,v2 --out fuzz-failures/ --max-per-path inductor=20

Every failure is shrunk to a minimal program (up to --shrink-limit per kind of failure),
triaged (the same program on the other strategies, PyTorch's builtin handling included, and on
aot_eager / capture) and saved as a runnable ``fuzz_repro_<hash>.py`` in --out. Exits 1 if any
program failed (PyTorch limitations, see ``fuzz.LIMITATIONS``, are counted but do not fail).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time

from . import fuzzing as fuzz


def _parse_limits(text: str) -> dict[str, int]:
    out = {}
    for item in filter(None, text.split(",")):
        path, _, n = item.partition("=")
        out[path.strip()] = int(n)
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tools.fuzz_sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=500, help="programs to generate")
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--paths", default="capture,inductor",
                    help=f"comma-separated, of {fuzz.PATHS}")
    ap.add_argument("--strategies", default="v1,v2",
                    help=f"comma-separated, of {fuzz.STRATEGIES}")
    ap.add_argument("--max-per-path", default="", metavar="PATH=N,...",
                    help="run PATH on the first N programs only (e.g. inductor=20)")
    ap.add_argument("--size", type=int, default=None,
                    help="statements per program (default: random 4-22)")
    ap.add_argument("--features", default="", metavar="[-]NAME,...",
                    help="turn generator features on (NAME) or off (-NAME): "
                    + ", ".join(f"{f.name} (default {'on' if f.default else 'off'})"
                                for f in dataclasses.fields(fuzz.Features)))
    ap.add_argument("--out", default="fuzz-failures", help="directory for minimal reproducers")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-limit", type=int, default=3,
                    help="exceptions shrunk per (strategy, path, exception); the rest are counted")
    ap.add_argument("--shrink-limit-mismatch", type=int, default=10,
                    help="wrong results shrunk per (strategy, path)")
    ap.add_argument("--shrink-checks", type=int, default=300,
                    help="compiles per shrink at most (80 on inductor)")
    ap.add_argument("--no-triage", action="store_true")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write the summary (seed, range, per strategy/path counts, "
                    "failures) as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per program")
    return ap


class Sweep:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.stats = collections.defaultdict(
            lambda: {"checks": 0, "time": 0.0, "bugs": 0, "limitations": 0}
        )
        self.shrunk: collections.Counter = collections.Counter()
        self.repros: dict[str, str] = {}  # file -> one-line description
        self.failed: list[str] = []
        self.eager_errors = 0
        self.start = time.time()
        self.interactive = sys.stdout.isatty()

    def log(self, msg: str) -> None:
        if self.interactive:
            print("\r\033[K", end="")
        print(msg, flush=True)

    def run_one(self, program: fuzz.FuzzProgram, strategy: str, path: str) -> str:
        key = f"{strategy}/{path}"
        t0 = time.perf_counter()
        try:
            failure = fuzz.check(program, strategy, path)
        except fuzz.EagerError:
            self.eager_errors += 1
            return f"{key} eager error"
        st = self.stats[key]
        st["checks"] += 1
        st["time"] += time.perf_counter() - t0
        if failure is None:
            return f"{key} ok"
        if not failure.is_bug:
            st["limitations"] += 1
            return f"{key} limitation"
        st["bugs"] += 1
        self.failed.append(f"{program.origin} {key}: {failure.kind}: {failure.message[:120]}")
        self.log(f"FAIL {program.origin} {key}: {failure.kind}: {failure.message[:160]}")
        self.save(failure)
        return f"{key} FAIL"

    def save(self, failure: fuzz.Failure) -> None:
        args, key = self.args, f"{failure.strategy}/{failure.path}"
        if args.no_shrink:
            f = fuzz.write_repro(failure, args.out)
            self.repros.setdefault(str(f), f"{key} {failure.kind}: {failure.message[:100]}")
            return
        sig = (failure.strategy, failure.path, failure.signature)
        limit = args.shrink_limit_mismatch if failure.kind == "mismatch" else args.shrink_limit
        if self.shrunk[sig] >= limit:
            return  # counted, not shrunk again
        self.shrunk[sig] += 1
        t0 = time.perf_counter()
        checks = args.shrink_checks if failure.path != "inductor" else min(args.shrink_checks, 80)
        small = fuzz.shrink_failure(failure, max_checks=checks)
        tri = None
        if not args.no_triage:
            paths = ["aot_eager", "capture"]
            if failure.path not in paths:
                paths.append(failure.path)
            tri = fuzz.triage(small.program, paths=paths)
        f = fuzz.write_repro(small, args.out, tri)
        seen = str(f) in self.repros
        self.repros.setdefault(str(f), f"{key} {small.kind}: {small.message[:100]}")
        self.log(f"     shrunk {len(failure.program.stmts)} -> {len(small.program.stmts)} "
                 f"statements in {time.perf_counter() - t0:.1f}s -> {f}"
                 + (" (seen before)" if seen else ""))

    def progress(self, k: int, program: fuzz.FuzzProgram, line: list[str]) -> None:
        args, elapsed = self.args, time.time() - self.start
        if args.verbose:
            self.log(f"[{k + 1}/{args.count}] {program.origin}: " + ", ".join(line))
        elif self.interactive:
            print(f"\r[{k + 1}/{args.count}] {elapsed:.0f}s failures={len(self.failed)}",
                  end="", flush=True)
        elif (k + 1) % 25 == 0:
            self.log(f"[{k + 1}/{args.count}] {elapsed:.0f}s failures={len(self.failed)}")

    def summary(self) -> int:
        args = self.args
        if self.interactive:
            print()
        print(f"\n== fuzz sweep: seed={args.seed}, {args.count} programs, "
              f"{time.time() - self.start:.0f}s total")
        for key, st in sorted(self.stats.items()):
            n = st["checks"]
            print(f"  {key:20s} {n:5d} checks  {st['time'] / max(n, 1):6.2f}s/check  "
                  f"{st['bugs']:3d} failures  {st['limitations']:3d} PyTorch limitations")
        if self.eager_errors:
            print(f"  {self.eager_errors} programs raised in eager (skipped)")
        if self.repros:
            print(f"\n{len(self.repros)} minimal reproducers in {args.out}:")
            for f, desc in self.repros.items():
                print(f"  {f}: {desc}")
        bugs = sum(st["bugs"] for st in self.stats.values())
        print(f"\n{bugs} failing checks" + (":" if bugs else ""))
        for line in self.failed[:50]:
            print("  " + line)
        if len(self.failed) > 50:
            print(f"  ... and {len(self.failed) - 50} more")
        if args.json:
            self.write_json(args.json)
        return 1 if bugs else 0

    def write_json(self, path: str) -> None:
        import json

        import torch

        args = self.args
        summary = {
            "seed": args.seed,
            "start": args.start,
            "count": args.count,
            "paths": args.paths,
            "strategies": args.strategies,
            "max_per_path": args.max_per_path,
            "torch": torch.__version__,
            "seconds": round(time.time() - self.start, 1),
            "eager_errors": self.eager_errors,
            "stats": {k: dict(v) for k, v in sorted(self.stats.items())},
            "failures": self.failed,
            "reproducers": self.repros,
        }
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
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
    try:
        features = fuzz.Features(**{
            name.lstrip("-"): not name.startswith("-") for name in args.features.split(",") if name
        })
    except TypeError as e:
        ap.error(f"--features: {e}")

    sweep = Sweep(args)
    try:
        for k, index in enumerate(range(args.start, args.start + args.count)):
            program = fuzz.program_for(args.seed, index, args.size, features)
            line = [
                sweep.run_one(program, strategy, path)
                for path in paths
                if not (path in limits and k >= limits[path])
                for strategy in strategies
            ]
            sweep.progress(k, program, line)
    except KeyboardInterrupt:
        sweep.log("interrupted")
    return sweep.summary()


if __name__ == "__main__":
    sys.exit(main())

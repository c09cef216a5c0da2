"""Differential fuzzing sweep: random programs with mutable custom ops, eager vs. compiled.

    python -m tools.fuzz_sweep --seed 0 --count 500 --paths capture,inductor \\
        --strategies v1,v2 --out fuzz-failures/ --max-per-path inductor=20

Every failure is shrunk to a minimal program (up to --shrink-limit per kind of failure; the
rest are saved as found),
triaged (the same program on the other strategies, PyTorch's builtin handling included, and on
aot_eager / capture) and saved as a runnable ``fuzz_repro_<hash>.py`` in --out. Exits 1 if any
program failed (PyTorch limitations, see ``fuzz.LIMITATIONS``, are counted but do not fail).

On the paths of --against-builtin (default: inductor) each program also runs under PyTorch's
built-in v2, and every configuration's compiled call is measured (the bytes it allocates,
``tools.compare``'s measurement; per program in the JSON). There a failure says whether the
built-in is right on the program (``wrong_builtin_right``) or wrong too
(``wrong_builtin_wrong``); a program where autofunc is right and the built-in wrong is counted
(``builtin_wrong``), not failed; and one where both are right and autofunc v2 allocates more
bytes than the built-in v2 is a failure of its own, ``bytes``, shrunk and saved like the rest.
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
                                for f in dataclasses.fields(fuzz.Features))
                    + "; a seed listed in results/README.md before 20261401 draws its programs "
                    "with -over_reads,-late_reads,-cache_ops,-returned_views")
    ap.add_argument("--out", default="fuzz-failures", help="directory for minimal reproducers")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-limit", type=int, default=3,
                    help="exceptions shrunk per (strategy, path, exception); the rest are counted")
    ap.add_argument("--shrink-limit-mismatch", type=int, default=10,
                    help="wrong results shrunk per (strategy, path)")
    ap.add_argument("--shrink-checks", type=int, default=300,
                    help="compiles per shrink at most (80 on inductor)")
    ap.add_argument("--no-triage", action="store_true")
    ap.add_argument("--against-builtin", default="inductor", metavar="PATH,...",
                    help="paths on which each program also runs under the built-in v2, every "
                    "configuration's bytes are measured, and autofunc v2 allocating more is a "
                    "failure ('' for none)")
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
        # index -> path -> configuration -> bytes its compiled call allocates
        self.allocated: dict[int, dict[str, dict[str, int]]] = {}
        self.shrunk: collections.Counter = collections.Counter()
        self.repros: dict[str, str] = {}  # file -> one-line description
        self.failed: list[str] = []
        self.shrunk_rows: list[dict] = []  # each shrunk failure: origin, kind, source, bytes
        self.eager_errors = 0
        self.start = time.time()
        self.interactive = sys.stdout.isatty()

    def log(self, msg: str) -> None:
        if self.interactive:
            print("\r\033[K", end="")
        print(msg, flush=True)

    def run_against_builtin(
        self, program: fuzz.FuzzProgram, index: int, path: str, strategies: list[str]
    ) -> list[str]:
        """All ``strategies`` and the built-in v2 on ``path``, each result sorted by
        ``fuzz.Verdict.outcome``."""
        t0 = time.perf_counter()
        try:
            verdict = fuzz.against_builtin(program, path, strategies)
        except fuzz.EagerError:
            self.eager_errors += 1
            return [f"{path} eager error"]
        seconds = (time.perf_counter() - t0) / (len(strategies) + 1)
        self.allocated.setdefault(index, {})[path] = dict(verdict.allocated)
        st = self.stats[f"{fuzz.BUILTIN}/{path}"]
        st["checks"] += 1
        st["time"] += seconds
        st[verdict.builtin] = st.get(verdict.builtin, 0) + 1  # right / wrong / fails
        theirs = verdict.failures[fuzz.BUILTIN]
        if theirs is not None and theirs.kind == "memory":  # of "wrong": the values right
            st["wrong_memory"] = st.get("wrong_memory", 0) + 1
        line = [f"{fuzz.BUILTIN}/{path} {verdict.builtin}"]
        for strategy in strategies:
            key = f"{strategy}/{path}"
            st = self.stats[key]
            st["checks"] += 1
            st["time"] += seconds
            outcome = verdict.outcome(strategy)
            if outcome not in ("ok", "limitation"):  # limitations are counted below
                st[outcome] = st.get(outcome, 0) + 1
            if verdict.over_a_lucky_builtin(strategy):  # of builtin_wrong: more bytes
                st["bytes_over_memory_wrong"] = st.get("bytes_over_memory_wrong", 0) + 1
            line.append(f"{key} {outcome}")
            if outcome == "limitation":
                st["limitations"] += 1
                continue
            failure = verdict.failure(strategy)
            if failure is None:
                continue
            st["bugs"] += 1
            self.failed.append(
                f"{program.origin} {key}: {failure.kind} ({outcome}): {failure.message[:120]}"
            )
            self.log(f"FAIL {program.origin} {key}: {failure.kind} ({outcome}): "
                     f"{failure.message[:160]}")
            self.save(failure)
        return line

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
        sig = (failure.strategy, failure.path, failure.signature, failure.builtin)
        limit = args.shrink_limit_mismatch if failure.kind == "mismatch" else args.shrink_limit
        if self.shrunk[sig] >= limit:  # counted, and saved as found (the same program is shrunk
            f = fuzz.write_repro(failure, args.out)  # the way the others were, if it is needed)
            self.repros.setdefault(str(f), f"{key} {failure.kind} (not shrunk): "
                                   f"{failure.message[:100]}")
            return
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
            if small.path in _against(args):
                verdict = fuzz.against_builtin(small.program, small.path, [small.strategy])
                small.builtin, small.allocated = verdict.builtin, dict(verdict.allocated)
                tri[f"bytes/{small.path}"] = ", ".join(
                    f"{k} {v} B" for k, v in sorted(verdict.allocated.items())
                )
        f = fuzz.write_repro(small, args.out, tri)
        seen = str(f) in self.repros
        self.repros.setdefault(str(f), f"{key} {small.kind}: {small.message[:100]}")
        self.shrunk_rows.append(_shrunk_row(failure, small, f))
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
            if key.startswith(f"{fuzz.BUILTIN}/"):
                print(f"  {key:20s} {n:5d} checks  {st['time'] / max(n, 1):6.2f}s/check  "
                      + "  ".join(f"{st.get(k, 0)} {k}" for k in ("right", "wrong", "fails"))
                      + f" (of them {st.get('wrong_memory', 0)} with right values)")
                continue
            outcomes = "".join(
                f"  {st[k]} {k}"
                for k in (*fuzz.OUTCOMES, "bytes_over_memory_wrong")
                if k not in ("ok", "limitation") and k in st
            )
            print(f"  {key:20s} {n:5d} checks  {st['time'] / max(n, 1):6.2f}s/check  "
                  f"{st['bugs']:3d} failures  {st['limitations']:3d} PyTorch limitations"
                  + outcomes)
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
            "shrunk": self.shrunk_rows,
            "against_builtin": args.against_builtin,
            "allocated": {str(k): v for k, v in sorted(self.allocated.items())},
        }
        with open(path, "w") as f:
            json.dump(summary, f, indent=1)


def _against(args: argparse.Namespace) -> list[str]:
    return [p for p in args.against_builtin.split(",") if p]


def _shrunk_row(found: fuzz.Failure, small: fuzz.Failure, repro) -> dict:
    """What the JSON (and a findings list) keeps of one shrunk failure."""
    return {
        "origin": found.program.origin,
        "strategy": small.strategy,
        "path": small.path,
        "kind": small.kind,
        "builtin": small.builtin,
        "message": small.message,
        "allocated": small.allocated,
        "source": small.program.full_source(),
        "repro": str(repro),
    }


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

    against = _against(args)
    for p in against:
        if p not in fuzz.PATHS:
            ap.error(f"--against-builtin: unknown path {p!r}")
    sweep = Sweep(args)
    try:
        for k, index in enumerate(range(args.start, args.start + args.count)):
            program = fuzz.program_for(args.seed, index, args.size, features)
            line: list[str] = []
            for path in paths:
                if path in limits and k >= limits[path]:
                    continue
                if path in against:
                    line += sweep.run_against_builtin(program, index, path, strategies)
                else:
                    line += [sweep.run_one(program, strategy, path) for strategy in strategies]
            sweep.progress(k, program, line)
    except KeyboardInterrupt:
        sweep.log("interrupted")
    return sweep.summary()


if __name__ == "__main__":
    sys.exit(main())

"""Shrinking a failing program (greedy statement and input deletion) and triage across
strategies and paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .builtin import check_bytes
from .check import Failure, check
from .program import _F64, _NAME, EagerError, FuzzProgram
from .state import _dims


def _without(program: FuzzProgram, drop: set[int]) -> FuzzProgram:
    """``program`` minus statements ``drop`` and everything that depends on what they define."""
    removed: set[str] = set()
    kept = []
    known = program.defined
    for i, s in enumerate(program.stmts):
        if i in drop or s.uses(known) & removed:
            removed.update(s.defs)
            continue
        kept.append(s)
    returns = tuple(r for r in program.returns if r not in removed)
    return dataclasses.replace(program, stmts=tuple(kept), returns=returns)


def _renamed(program: FuzzProgram, i: int) -> FuzzProgram | None:
    """Drop view statement ``i`` and use its source in its place."""
    s = program.stmts[i]
    if s.src is None or len(s.defs) != 1:
        return None
    old = s.defs[0]
    stmts = [t.rename(old, s.src) for t in program.stmts[i + 1 :]]
    returns = tuple(s.src if r == old else r for r in program.returns)
    returns = tuple(dict.fromkeys(returns))
    return dataclasses.replace(program, stmts=program.stmts[:i] + tuple(stmts), returns=returns)


def _drop_param(program: FuzzProgram, k: int) -> FuzzProgram | None:
    p = program.params[k]
    used = {n for s in program.stmts for n in s.uses(frozenset(program.params))}
    used |= set(program.returns)
    used |= {n for j, e in enumerate(program.inputs) if j != k for n in _NAME.findall(e)}
    if p in used:
        return None
    return dataclasses.replace(
        program,
        params=program.params[:k] + program.params[k + 1 :],
        inputs=program.inputs[:k] + program.inputs[k + 1 :],
    )


def _plain_inputs(program: FuzzProgram):
    """Each input in turn replaced by a contiguous tensor of the same shape (no aliasing)."""
    _, make_inputs = program.build()
    shapes = [tuple(t.shape) for t in make_inputs()]
    for k, expr in enumerate(program.inputs):
        plain = f"torch.randn({_dims(shapes[k]) if shapes[k] else '()'}, {_F64})"
        if expr != plain:
            inputs = program.inputs[:k] + (plain,) + program.inputs[k + 1 :]
            yield dataclasses.replace(program, inputs=inputs)


def _candidates(program: FuzzProgram):
    n = len(program.stmts)
    for i in reversed(range(n)):
        yield _without(program, {i})
    for i in reversed(range(n)):
        c = _renamed(program, i)
        if c is not None:
            yield c
    for j in range(len(program.returns)):
        yield dataclasses.replace(program, returns=program.returns[:j] + program.returns[j + 1 :])
    for k in reversed(range(len(program.params))):
        c = _drop_param(program, k)
        if c is not None:
            yield c
    yield from _plain_inputs(program)


def shrink(
    program: FuzzProgram,
    still_fails: Callable[[FuzzProgram], bool],
    *,
    max_checks: int = 400,
    log: Callable[[str], None] | None = None,
) -> FuzzProgram:
    """Greedily delete statements (and their dependents), inline views and drop returns and
    unused inputs while ``still_fails`` holds; candidates that do not run in eager are skipped.
    """
    checks = 0
    progress = True
    while progress and checks < max_checks:
        progress = False
        for cand in _candidates(program):
            if cand.full_source() == program.full_source() or not cand.runs_in_eager():
                continue
            checks += 1
            if still_fails(cand):
                if log:
                    log(f"shrink: {len(program.stmts)} -> {len(cand.stmts)} statements")
                program = cand
                progress = True
                break
            if checks >= max_checks:
                break
    return program


def shrink_failure(failure: Failure, *, max_checks: int = 400, log=None) -> Failure:
    """The smallest program found that still fails like ``failure``, with its failure."""
    last = {"f": failure}

    def again(p: FuzzProgram) -> Failure | None:
        if failure.kind == "bytes":
            return check_bytes(p, failure.path, failure.strategy)
        return check(p, failure.strategy, failure.path)

    def still_fails(p: FuzzProgram) -> bool:
        try:
            f = again(p)
        except EagerError:
            return False
        if f is not None and f.signature == failure.signature:
            last["f"] = f
            return True
        return False

    small = shrink(failure.program, still_fails, max_checks=max_checks, log=log)
    f = last["f"]
    return f if f.program == small else (again(small) or f)


def triage(
    program: FuzzProgram,
    paths: Sequence[str] = ("aot_eager", "capture"),
    strategies: Sequence[str] = ("v1", "v2", "builtin"),
) -> dict[str, str]:
    """``"strategy/path" -> "ok" | the failure line`` on the given combinations (each a
    correctness check; a ``bytes`` failure's numbers are in the failure itself)."""
    out = {}
    for s in strategies:
        for p in paths:
            try:
                f = check(program, s, p)
            except EagerError as e:
                out[f"{s}/{p}"] = f"eager error {e}"
                continue
            out[f"{s}/{p}"] = "ok" if f is None else f"{f.kind}: {f.message}"
    return out

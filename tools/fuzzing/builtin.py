"""A program against PyTorch's built-in v2: which of the two is wrong, and the bytes each one's
generated code allocates (the corpus's bytes gate, ``tools.compare.bytes_gate``, on random
programs).

:func:`against_builtin` runs a program under the built-in v2 and under autofunc's strategies
on one path, measuring every configuration, and sorts each strategy's result into one of
:data:`OUTCOMES`. Where autofunc v2 and the built-in are both right and autofunc allocates
more, the result is a failure of its own, ``kind="bytes"`` (:func:`bytes_failure`), shrunk and
written out like a wrong value (:func:`check_bytes` is its check).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .check import Failure, check, peak_key
from .program import FuzzProgram

BUILTIN = "builtin_v2"  # the bar: PyTorch's auto_functionalized_v2 (tools.compare's builtin_v2)
BYTES_STRATEGY = "v2"  # the strategy held to it

# What one strategy's result is, next to the built-in's on the same program and path.
OUTCOMES = (
    "ok",  # right, and (v2) no more bytes than a right built-in
    "builtin_wrong",  # right where the built-in is wrong or raises: counted, not a failure
    "wrong_builtin_right",  # wrong (or raises) where the built-in is right: the failure to fix
    "wrong_builtin_wrong",  # wrong (or raises) where the built-in is wrong or raises too
    "bytes",  # right, the built-in right, and autofunc v2 allocates more: a failure
    "limitation",  # a PyTorch limitation (check.LIMITATIONS): counted, not a failure
)


@dataclasses.dataclass
class Verdict:
    """One program on one path: each strategy's failure (``None``: right) and bytes."""

    program: FuzzProgram
    path: str
    failures: dict[str, Failure | None]
    allocated: dict[str, int]

    @property
    def builtin(self) -> str:
        """The built-in's result: "right", "wrong" (a mismatch, or a call that saw other
        memory than in eager) or "fails" (raises)."""
        f = self.failures[BUILTIN]
        return "right" if f is None else "wrong" if f.kind in ("mismatch", "memory") else "fails"

    def over_a_lucky_builtin(self, strategy: str) -> bool:
        """Whether ``strategy`` allocates more than a built-in whose values are right but whose
        calls saw other memory than in eager (right for these op bodies' order of reads and
        writes only): counted apart, for the values-only comparison."""
        f = self.failures[BUILTIN]
        return (
            f is not None
            and f.kind == "memory"
            and self.failures[strategy] is None
            and self._over_bytes(strategy)
        )

    def outcome(self, strategy: str) -> str:
        """One of :data:`OUTCOMES` for ``strategy``."""
        f = self.failures[strategy]
        if f is not None and not f.is_bug:
            return "limitation"
        if f is not None:
            return "wrong_builtin_right" if self.builtin == "right" else "wrong_builtin_wrong"
        if self.builtin != "right":
            return "builtin_wrong"
        return "bytes" if self._over_bytes(strategy) else "ok"

    def _over_bytes(self, strategy: str) -> bool:
        ours, theirs = self.allocated.get(strategy), self.allocated.get(BUILTIN)
        return (
            strategy == BYTES_STRATEGY
            and ours is not None
            and theirs is not None
            and ours > theirs
        )

    def failure(self, strategy: str) -> Failure | None:
        """The failure to report for ``strategy`` (its own, the built-in's result attached, or
        a ``bytes`` one); ``None`` where :meth:`outcome` is "ok" or "builtin_wrong"."""
        outcome = self.outcome(strategy)
        f = self.failures[strategy]
        if f is not None:
            f.builtin, f.allocated = self.builtin, dict(self.allocated)
            return f
        if outcome != "bytes":
            return None
        return bytes_failure(self.program, strategy, self.path, self.allocated)


def bytes_failure(
    program: FuzzProgram, strategy: str, path: str, allocated: dict[str, int]
) -> Failure:
    ours, theirs = allocated[strategy], allocated[BUILTIN]
    rows = ", ".join(f"{k} {v} B" for k, v in sorted(allocated.items()))
    peaks = allocated.get(peak_key(strategy)), allocated.get(peak_key(BUILTIN))
    at_peak = f"; at peak {peaks[0]} B, the built-in {peaks[1]} B" if None not in peaks else ""
    return Failure(
        program,
        strategy,
        path,
        "bytes",
        f"autofunc {strategy} allocates {ours} B, the (right) built-in v2 {theirs} B "
        f"(+{ours - theirs} B){at_peak}",
        f"bytes allocated per configuration: {rows}",
        builtin="right",
        allocated=dict(allocated),
    )


def against_builtin(
    program: FuzzProgram, path: str, strategies: Sequence[str] = (BYTES_STRATEGY,)
) -> Verdict:
    """Run ``program`` on ``path`` under the built-in v2 and each of ``strategies``, measuring
    the bytes each compiled call allocates.

    Raises:
        EagerError: the program raises in eager (regenerate it; not a finding).
    """
    allocated: dict[str, int] = {}
    failures = {BUILTIN: check(program, BUILTIN, path, allocated)}
    for strategy in strategies:
        failures[strategy] = check(program, strategy, path, allocated)
    verdict = Verdict(program, path, failures, allocated)
    if any(verdict.outcome(s) == "bytes" for s in strategies):
        _measure_builtin_again(program, path, allocated)
    return verdict


def _measure_builtin_again(program: FuzzProgram, path: str, allocated: dict[str, int]) -> None:
    """Note [Bytes measured on equal terms]
    Inductor keeps state across compiles in one process: the first time it lowers a custom op
    it registers the op as one whose inputs it realizes early, and from then on it computes such
    an input where the input stands, which changes which buffers it can reuse. The built-in is
    compiled first, so it alone ran without that state, and a program could look 8 B over the
    built-in that is 8 B under it in the other order (fuzz seed 20261940 #103: 480 B against
    472 B, and 472 B against 480 B with autofunc compiled first). Where autofunc v2 allocates
    more, the built-in is measured once more, now on the terms autofunc had, and that measure
    is the bar; its values were judged the first time."""
    again: dict[str, int] = {}
    check(program, BUILTIN, path, again)
    for key in (BUILTIN, peak_key(BUILTIN)):
        if key in again:
            allocated[key] = again[key]


def check_bytes(program: FuzzProgram, path: str, strategy: str = BYTES_STRATEGY) -> Failure | None:
    """The ``bytes`` failure of ``program`` (both right, autofunc allocates more), or ``None``:
    what shrinking a ``bytes`` failure keeps true."""
    verdict = against_builtin(program, path, (strategy,))
    return verdict.failure(strategy) if verdict.outcome(strategy) == "bytes" else None

"""A random program as source text: statements, inputs, and running it in eager."""

from __future__ import annotations

import dataclasses
import hashlib
import linecache
import re
import textwrap
from collections.abc import Callable
from typing import Any

import torch

from .ops import _NS, REGIONS, tensors_in

_F64 = "dtype=torch.float64"
_NAME = re.compile(r"(?<![.\w])([A-Za-z_]\w*)")


@dataclasses.dataclass(frozen=True)
class Stmt:
    """One line of a program. ``src`` is set for a view whose uses may be renamed to it."""

    text: str
    defs: tuple[str, ...]
    kind: str  # "buffer" | "view" | "read" | "call" | "inplace"
    src: str | None = None

    def uses(self, known: set[str] | frozenset[str]) -> set[str]:
        return set(self.uses_in_order(known))

    def uses_in_order(self, known: set[str] | frozenset[str]) -> list[str]:
        """The names of ``known`` the statement reads, each once, in the order they appear: what
        the generator draws from (a set's order depends on the process's string hashing, so a
        seed would name another program in each process)."""
        # The right-hand side only: ``v1, v2 = t0.split(...)`` uses t0.
        rhs = self.text.split("=", 1)[1] if self.defs else self.text
        return [n for n in dict.fromkeys(_NAME.findall(rhs)) if n in known]

    def rename(self, old: str, new: str) -> Stmt:
        pat = re.compile(rf"(?<![.\w]){re.escape(old)}(?!\w)")
        if self.defs:
            lhs, rhs = self.text.split("=", 1)
            return dataclasses.replace(self, text=lhs + "=" + pat.sub(new, rhs))
        return dataclasses.replace(self, text=pat.sub(new, self.text))


@dataclasses.dataclass(frozen=True)
class FuzzProgram:
    params: tuple[str, ...]
    inputs: tuple[str, ...]  # one expression per param (may refer to earlier params)
    input_seed: int
    stmts: tuple[Stmt, ...]
    returns: tuple[str, ...]
    origin: str = ""  # e.g. "seed=0 index=12"

    # -- text ----------------------------------------------------------------------------------

    def source(self) -> str:
        body = [s.text for s in self.stmts]
        ret = ", ".join(self.returns)
        body.append(f"return ({ret},)" if self.returns else "return ()")
        head = f"def prog({', '.join(self.params)}):\n"
        return head + textwrap.indent("\n".join(body), "    ") + "\n"

    def inputs_source(self) -> str:
        lines = [f"torch.manual_seed({self.input_seed})"]
        lines += [f"{p} = {e}" for p, e in zip(self.params, self.inputs)]
        lines.append(f"return ({', '.join(self.params)},)" if self.params else "return ()")
        return "def make_inputs():\n" + textwrap.indent("\n".join(lines), "    ") + "\n"

    def full_source(self) -> str:
        return self.source() + "\n\n" + self.inputs_source()

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.full_source().encode()).hexdigest()[:10]

    # -- execution -----------------------------------------------------------------------------

    def build(self) -> tuple[Callable, Callable[[], tuple]]:
        """Fresh ``(prog, make_inputs)`` function objects."""
        src = self.full_source()
        filename = f"<autofunc-fuzz-{self.digest}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict[str, Any] = {"torch": torch, "ops": getattr(torch.ops, _NS), "regions": REGIONS}
        exec(compile(src, filename, "exec"), ns)
        return ns["prog"], ns["make_inputs"]

    def run_eager(self) -> tuple[Any, tuple]:
        """(outputs, inputs after the call); raises :class:`EagerError` if eager raises."""
        prog, make_inputs = self.build()
        inputs = make_inputs()
        try:
            out = prog(*inputs)
        except Exception as e:  # noqa: BLE001
            raise EagerError(f"{type(e).__name__}: {e}") from e
        return out, inputs

    def runs_in_eager(self) -> bool:
        try:
            out, inputs = self.run_eager()
        except EagerError:
            return False
        return all(bool(torch.isfinite(t).all()) for t in tensors_in((out, inputs)))

    @property
    def defined(self) -> frozenset[str]:
        return frozenset(self.params) | frozenset(d for s in self.stmts for d in s.defs)


class EagerError(Exception):
    """The program itself raises in eager: not a finding, regenerate it."""

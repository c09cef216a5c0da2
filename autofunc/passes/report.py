"""What the re-inplace pass decided and why: ``Decision``, ``CallReport``, ``Report``.

Pure data plus rendering; nothing here inspects graphs. A :class:`Decision` is falsy when the
buffer was cloned, so ``if decision:`` reads as "written in place". A report round-trips through
JSON (``Report.to_json``/``Report.from_json``): Inductor's cache stores it with the compiled
graph (Note [Reports on a cache hit] in autofunc/backends/inductor/glue.py).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .copies import Copy, CopyKind
from .rules import Reason  # written beside the rules that give each (rules.py)

__all__ = ["Reason", "Decision", "CallReport", "Report", "format_bytes"]


@dataclasses.dataclass(frozen=True)
class Decision:
    """One mutable buffer of one call: a v2 base, or a v1 mutable argument."""

    args: tuple[str, ...]  # the mutable arguments regenerated from this buffer
    buffer: str  # the graph node holding the buffer
    chains: tuple[str, ...]  # per argument, the view chain that regenerates it ("alias", "[3, 0]")
    reason: Reason
    nbytes: int  # bytes cloned, or saved when written in place
    detail: str = ""

    @property
    def inplace(self) -> bool:
        return self.reason is Reason.INPLACE

    def __bool__(self) -> bool:
        return self.inplace

    def explain(self) -> str:
        why = self.reason.value + (f" ({self.detail})" if self.detail else "")
        return why


@dataclasses.dataclass
class CallReport:
    node: str
    op: str
    strategy: str
    decisions: list[Decision]
    note: str = ""  # about the call as a whole (e.g. a write analysis that failed)


@dataclasses.dataclass
class Report:
    """The pass's account of one graph (or, from ``explain``, of several)."""

    calls: list[CallReport] = dataclasses.field(default_factory=list)
    graph: str = ""
    note: str = ""  # about the graph as a whole (where the pass ran, when not where installed)
    # every copy node of the final graph, with what it is for (Note [Every copy in the report]
    # in copies.py); the kept clones of ``decisions`` are among them
    copies: list[Copy] = dataclasses.field(default_factory=list)

    @property
    def decisions(self) -> list[Decision]:
        return [d for c in self.calls for d in c.decisions]

    @property
    def num_clones(self) -> int:
        return sum(1 for d in self.decisions if not d)

    @property
    def bytes_cloned(self) -> int:
        return sum(d.nbytes for d in self.decisions if not d)

    @property
    def bytes_saved(self) -> int:
        return sum(d.nbytes for d in self.decisions if d)

    @property
    def mutation_copies(self) -> list[Copy]:
        """The copies the final graph makes for the mutations of its calls: kept clones, write
        backs, realized reads, outputs copied out of written inputs, repairs."""
        return [c for c in self.copies if c.for_mutation]

    @property
    def bytes_copied(self) -> int:
        """What :attr:`mutation_copies` write, in bytes: every copy the graph makes for a
        mutation (``bytes_cloned`` counts only the clones the decisions keep)."""
        return sum(c.nbytes for c in self.mutation_copies)

    def written_into_inputs(self, moves: list[tuple[str, str, str]]) -> None:
        """Each ``(call, buffer, input)``: the clone the call's decision on ``buffer`` kept was
        replaced by the graph input its value is copied into, which the call now writes in
        place (Note [A buffer copied into an input is the input])."""
        for call, buffer, graph_input in moves:
            for c in self.calls:
                if c.node != call:
                    continue
                c.decisions = [
                    dataclasses.replace(
                        d,
                        reason=Reason.INPLACE,
                        detail=f"into the graph input {graph_input} its value is copied into, "
                        f"in place of the clone kept because {d.explain()}",
                    )
                    if d.buffer == buffer and not d
                    else d
                    for d in c.decisions
                ]

    # the version of the JSON form; from_json refuses any other
    JSON_FORMAT = 2

    def to_json(self) -> str:
        """The report as a JSON object (reasons by name): what ``from_json`` reads back."""
        return json.dumps(
            {
                "format": self.JSON_FORMAT,
                "graph": self.graph,
                "note": self.note,
                "calls": [
                    {
                        "node": c.node,
                        "op": c.op,
                        "strategy": c.strategy,
                        "note": c.note,
                        "decisions": [
                            {
                                "args": list(d.args),
                                "buffer": d.buffer,
                                "chains": list(d.chains),
                                "reason": d.reason.name,
                                "nbytes": int(d.nbytes),
                                "detail": d.detail,
                            }
                            for d in c.decisions
                        ],
                    }
                    for c in self.calls
                ],
                "copies": [
                    {"node": c.node, "kind": c.kind.name, "call": c.call, "nbytes": int(c.nbytes)}
                    for c in self.copies
                ],
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Report:
        """The report ``to_json`` wrote. ``ValueError`` for text of another format or a reason
        this version does not know."""
        try:
            data: Any = json.loads(text)
            if data.get("format") != cls.JSON_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {cls.JSON_FORMAT}")
            calls = [
                CallReport(
                    node=c["node"],
                    op=c["op"],
                    strategy=c["strategy"],
                    note=c["note"],
                    decisions=[
                        Decision(
                            args=tuple(d["args"]),
                            buffer=d["buffer"],
                            chains=tuple(d["chains"]),
                            reason=Reason[d["reason"]],
                            nbytes=int(d["nbytes"]),
                            detail=d["detail"],
                        )
                        for d in c["decisions"]
                    ],
                )
                for c in data["calls"]
            ]
            copies = [
                Copy(c["node"], CopyKind[c["kind"]], c["call"], int(c["nbytes"]))
                for c in data["copies"]
            ]
            return cls(calls=calls, graph=data["graph"], note=data["note"], copies=copies)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"not an autofunc report in JSON: {e!r}") from None

    def extend(self, other: "Report") -> None:
        self.calls.extend(other.calls)
        self.copies.extend(other.copies)
        if other.note and other.note not in self.note:
            self.note = f"{self.note}; {other.note}" if self.note else other.note

    def rows(self) -> list[tuple[str, ...]]:
        rows = []
        for call in self.calls:
            for d in call.decisions:
                # one row per argument; the buffer's result, bytes and reason on its first row
                for i, (arg, chain) in enumerate(zip(d.args, d.chains)):
                    result = ("in place" if d else "CLONE") if i == 0 else '"'
                    nbytes, why = (format_bytes(d.nbytes), d.explain()) if i == 0 else ("", "")
                    rows.append(
                        (
                            call.node,
                            call.op,
                            call.strategy,
                            arg,
                            d.buffer,
                            chain,
                            result,
                            nbytes,
                            why,
                        )
                    )
        return rows

    def __str__(self) -> str:
        header = ("call", "op", "strategy", "argument", "buffer", "view", "result", "bytes", "why")
        rows = self.rows()
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

        def line(r: tuple) -> str:
            return "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()

        title = f"autofunc re-inplace report{(' for ' + self.graph) if self.graph else ''}"
        if not self.calls:
            return (
                f"{title}: no call of a mutable op registered with autofunc was compiled "
                "(is the op registered, and does the function call it?)"
            )
        out = [title, line(header), line(tuple("-" * w for w in widths))]
        out += [line(r) for r in rows]
        if any(r[6] == '"' for r in rows):
            out.append(
                '" (result): the same buffer as the row above, written by another argument of '
                "the same call; one decision covers both (its result, bytes and why are on the "
                "buffer's first row)"
            )
        out += [f"note on {c.node} ({c.op}): {c.note}" for c in self.calls if c.note]
        out += [f"note: {self.note}"] if self.note else []
        out += self._copy_lines()
        out.append(
            f"{len(self.calls)} call(s), {self.num_clones} clone(s): "
            f"{format_bytes(self.bytes_cloned)} cloned, {format_bytes(self.bytes_saved)} saved; "
            f"the graph copies {format_bytes(self.bytes_copied)} for mutations "
            f"({len(self.mutation_copies)} copy node(s))"
        )
        return "\n".join(out)

    def _copy_lines(self) -> list[str]:
        """The copies for mutations that are no kept clone, one line each; the program's own
        copies in one line."""
        lines = [
            f"copy {c.node}: {format_bytes(c.nbytes)}, {c.kind.value}"
            + (f" ({c.call})" if c.call else "")
            for c in self.mutation_copies
            if c.kind is not CopyKind.CLONE
        ]
        own = [c for c in self.copies if not c.for_mutation]
        if own:
            nbytes = format_bytes(sum(c.nbytes for c in own))
            lines.append(
                f"{len(own)} copy node(s) of the program's own, {nbytes} (eager makes them "
                "too; not counted below)"
            )
        return lines


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

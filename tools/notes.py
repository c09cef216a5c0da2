"""The Notes of the code base: where each is written, and whether every citation resolves.

A Note is written, in the code (not in tests or docs), as a line that holds only
``Note [Title]`` (in a docstring, or in a comment that goes on below it), or as a docstring
that opens with ``Note [Title]: text`` (or, where there is neither, a comment of several
lines that does); it is cited as ``Note [Title]`` anywhere (a citation may wrap across
comment lines). A comment line that holds only the Note's name, with code below it, cites it.
docs/architecture.md keeps an index of the Notes between its heading ``## Index of the Notes``
and the end of the file.

    python -m tools.notes            # print the problems; exit 1 if any
    python -m tools.notes --write    # rewrite the index in docs/architecture.md

``tests/test_notes.py`` checks that every citation names a Note that is written, that no Note
is written twice, and that the index is the one ``--write`` would make.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

__all__ = ["ROOT", "Notes", "collect", "index_text", "problems"]

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("autofunc", "kernels", "tools", "tests", "examples", "scripts", "docs", "README.md")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
_HEADING = "## Index of the Notes"
_PREAMBLE = (
    "Where each Note is written (file:line; `python -m tools.notes --write` regenerates this "
    "list and\n`tests/test_notes.py` checks it; `grep -rn \"Note \\[name\\]\"` finds every "
    "citation).\n"
)

# a line that starts with ``Note [Title]``, alone or followed by ``: text``
_DEFINITION = re.compile(r'^\s*(#\s*|r?""")?Note \[([^\]]+)\](:.*)?\s*$')
# Notes are written in the code, not in the tests or the docs (which cite them)
_NOT_WRITTEN_IN = ("tests", "docs")
_CITATION = re.compile(r"Note \[([^\]]+)\]")
# a line break inside a comment or a docstring, with what continues the text on the next line
_WRAP = re.compile(r"\s*\n\s*(?:#+|//|\*|>)?\s*")


class Notes:
    def __init__(self) -> None:
        self.written: dict[str, list[str]] = {}  # title -> ["path:line", ...]
        self.cited: dict[str, list[str]] = {}  # title -> ["path", ...]


def _files() -> list[Path]:
    out = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(
                p for p in path.rglob("*") if p.suffix in (".py", ".md", ".sh") and p.is_file()
            )
    return [p for p in out if p not in (ARCHITECTURE, Path(__file__).resolve())]


def collect() -> Notes:
    notes = Notes()
    weak: dict[str, list[str]] = {}
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        for title in _CITATION.findall(_WRAP.sub(" ", text)):
            notes.cited.setdefault(" ".join(title.split()), []).append(rel)
        if rel.split("/")[0] in _NOT_WRITTEN_IN or rel.endswith(".md"):
            continue
        lines = text.splitlines()
        for i, line in enumerate(lines, 1):
            m = _DEFINITION.match(line)
            if m is None:
                continue
            opener, title, text_after = m.group(1) or "", m.group(2), m.group(3)
            comment = opener.startswith("#")
            goes_on = i < len(lines) and lines[i].lstrip().startswith("#")
            if not text_after and (not comment or goes_on) or text_after and opener.endswith('"""'):
                notes.written.setdefault(title, []).append(f"{rel}:{i}")
            elif text_after and comment and goes_on:
                weak.setdefault(title, []).append(f"{rel}:{i}")
    for title, where in weak.items():  # ``# Note [T]: text`` over several lines, if nothing else
        if title not in notes.written:
            notes.written[title] = where[:1]
    return notes


def index_text(notes: Notes) -> str:
    lines = [_HEADING, "", _PREAMBLE]
    for title in sorted(notes.written, key=str.lower):
        lines.append(f"- Note [{title}]: `{notes.written[title][0]}`")
    return "\n".join(lines) + "\n"


def problems(notes: Notes) -> list[str]:
    out = [
        f"Note [{title}] is written twice: {', '.join(where)}"
        for title, where in sorted(notes.written.items())
        if len(where) > 1
    ]
    out += [
        f"Note [{title}] is cited in {', '.join(sorted(set(where)))} but written nowhere"
        for title, where in sorted(notes.cited.items())
        if title not in notes.written and title != "name"
    ]
    text = ARCHITECTURE.read_text(encoding="utf-8")
    if _HEADING not in text or text[text.index(_HEADING):] != index_text(notes):
        out.append(
            "the index of the Notes in docs/architecture.md is out of date "
            "(python -m tools.notes --write)"
        )
    return out


def write_index(notes: Notes) -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    head = text[: text.index(_HEADING)] if _HEADING in text else text.rstrip("\n") + "\n\n\n"
    ARCHITECTURE.write_text(head + index_text(notes), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.notes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the index in architecture.md")
    args = ap.parse_args(argv)
    notes = collect()
    if args.write:
        write_index(notes)
    found = problems(notes)
    for p in found:
        print(p)
    print(f"{len(notes.written)} Notes written, {sum(map(len, notes.cited.values()))} citations")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""The repository speaks of the software: no tracked text file names how the work on it was
organised (its stages of work, who wrote what, internal issue numbers). What a user notices is
in CHANGELOG.md, the reasoning in the code's Notes and the commit messages, the measurements in
results/ with their date, machine and commit.

Public references stay: PyTorch and vLLM issues and PRs (``pytorch#198102``, ``PyTorch issues
#198131``, ``PR #198260``), URLs, and helpers in the sense of helper functions."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Each pattern names one way the text can speak of the work instead of the software.
WORDS = {
    "a stage of work": re.compile(r"\bsessions?\b", re.I),
    "an internal issue number": re.compile(r"\bissues?[ -]\d+|\bitems? \d+[a-z]?\b", re.I),
    "who wrote it": re.compile(
        r"\bthe developer\b(?!s? tools?\b)|\bby a helper\b|\b(?:a|the) helper(?:'s)? "
        r"(?:wrote|transcribed|measured|found|cases?)\b",
        re.I,
    ),
    "a stage of review": re.compile(r"\breview mend\b|\b(?:first|second|third) round\b", re.I),
}

# A number after "issue" is public where a project names it: "PyTorch issue 12345".
PUBLIC = re.compile(r"(?:pytorch|vllm|sglang|triton|github|upstream)\W{0,3}$", re.I)


def tracked_text_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p and p != THIS]


def offending_lines(text: str) -> list[tuple[int, str, str]]:
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for what, pattern in WORDS.items():
            for m in pattern.finditer(line):
                if what == "an internal issue number" and PUBLIC.search(line[: m.start()]):
                    continue
                found.append((lineno, what, line.strip()[:120]))
    return found


def test_no_tracked_file_speaks_of_how_the_work_was_organised():
    bad = []
    for rel in tracked_text_files():
        path = ROOT / rel
        try:
            data = path.read_bytes()
        except OSError:  # listed but absent (a sparse or partial checkout)
            continue
        if b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        bad += [f"{rel}:{n}: {what}: {line}" for n, what, line in offending_lines(text)]
    assert not bad, "text about the work, not the software:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "line",
    [
        "the second session of 2026-11-28",
        "Session start (bc7b5f8)",
        "the fixes of issue 7",
        "(issue 18, item 9b)",
        "Issue 10 item 3: reports used to accumulate",
        "the issue-7 item that covers them",
        "The developer's record of every change",
        "A helper wrote 26 programs",
        "Peak bytes of the helper's cases",
        "after the review mend (d2544fa)",
        "after the second round, 8 layers",
    ],
)
def test_the_words_are_found(line):
    assert offending_lines(line)


@pytest.mark.parametrize(
    "line",
    [
        "zeroing the rest (pytorch#198102; PyTorch's built-in v1 gives the same wrong result)",
        "The two bug classes of PyTorch issues #198131 and #195451",
        "graph inputs that share storage (issue #153389 family)",
        "see PyTorch issue 12345",
        "The developer tools are not installed",
        "the developer tool ``tools.compare``",
        "Pure measurement helpers; the helper ops of the pass",
        "start_new_session=True",
        "a read placed by the same function as a write",
    ],
)
def test_public_references_and_helper_functions_pass(line):
    assert not offending_lines(line)

"""Every Note cited is written somewhere, once, and docs/architecture.md indexes them all where
they are (``python -m tools.notes --write`` regenerates the index)."""

from tools import notes


def test_every_note_resolves_and_the_index_is_current():
    found = notes.collect()
    assert len(found.written) > 80  # the reader finds the Notes at all
    assert notes.problems(found) == []


def test_a_citation_of_a_note_nobody_wrote_is_a_problem(monkeypatch):
    found = notes.collect()
    found.cited["A Note nobody wrote"] = ["autofunc/x.py"]
    assert any("A Note nobody wrote" in p for p in notes.problems(found))

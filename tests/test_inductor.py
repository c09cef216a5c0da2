"""Tests for autofunc/backends/inductor/glue.py's cache key (Note [The cache key covers the graph's code])."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import pkgutil
from pathlib import Path

import autofunc
from autofunc import inductor, source_key
from autofunc.registry import switches

_ROOT = Path(autofunc.__file__).parent


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` of autofunc, or None if ``name`` is no module."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def _imported_autofunc_modules(name: str) -> set[str]:
    """The autofunc modules ``name``'s source imports, at module level or inside a function."""
    path = _module_file(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names if _module_file(f"{base}.{a.name}")}
    return {m for m in found if m == "autofunc" or m.startswith("autofunc.")}


def _closure(roots: list[str]) -> set[str]:
    """Every autofunc module that importing ``roots`` may run, with their packages' __init__s.

    The imports of ``autofunc/__init__.py`` itself are not followed: it imports the whole public
    API (``explain`` among them) for the user, not for the pass."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages above it
        if name != "autofunc":
            todo += _imported_autofunc_modules(name)
    return seen


def test_the_key_hashes_everything_the_pass_and_the_registry_import():
    # A module the pass, the HOPs or the registry import decides what a compiled graph holds;
    # a cache key without it would serve stale graphs after that module changed.
    roots = ["autofunc.inductor", "autofunc.backends.inductor.glue", "autofunc.registry"]
    for package in (autofunc.hops, autofunc.passes, autofunc.registry):
        roots += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    needed = {_module_file(m).resolve() for m in _closure(roots)}
    hashed = {p.resolve() for p in source_key.graph_sources()}
    assert not needed - hashed, sorted(str(p.relative_to(_ROOT)) for p in needed - hashed)
    # What the key leaves out cannot change a graph: the pass and the registry never import it.
    left_out = {p.resolve() for p in _ROOT.rglob("*.py")} - hashed
    assert left_out and not left_out & needed


def test_the_key_hashes_folders_at_any_depth():
    rel = {p.relative_to(_ROOT).as_posix() for p in source_key.graph_sources()}
    want = {"registry/routing.py", "backends/inductor/glue.py", "hops/v2.py", "passes/reinplace.py"}
    assert want <= rel
    assert not {r for r in rel if r.split("/")[0] in ("bench", "cli.py", "explain.py")}


def test_the_key_changes_with_the_registrys_source(monkeypatch):
    # The registry's routing decides which HOP a call becomes (a v1 call may become v2), so
    # editing it must miss the cache.
    before = inductor.ReinplacePass().uuid()
    real = pathlib.Path.read_bytes

    def edited(path: pathlib.Path) -> bytes:
        data = real(path)
        routing = path.parent.name == "registry" and path.name == "routing.py"
        return data + b"\n# edited\n" if routing else data

    monkeypatch.setattr(pathlib.Path, "read_bytes", edited)
    source_key.source_digest.cache_clear()
    try:
        after = inductor.ReinplacePass().uuid()
    finally:
        monkeypatch.undo()
        source_key.source_digest.cache_clear()
    assert after[0] != before[0] and after[1:] == before[1:]
    assert inductor.ReinplacePass().uuid() == before


def test_the_key_changes_with_the_reinplace_switch(monkeypatch):
    before = inductor.ReinplacePass().uuid()
    monkeypatch.setattr(switches.state, "reinplace", False)
    assert inductor.ReinplacePass().uuid()[0] != before[0]

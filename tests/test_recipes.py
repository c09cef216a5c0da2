"""docs/architecture.md's "where to add" recipes are checked: each names the files it touches
and an example test that adds such a thing in the test alone; the files exist, the example
exists, and what the example changes of autofunc (``monkeypatch.setattr``/``setitem`` on a
module or one of its tables) is in those files."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _recipes() -> dict[str, tuple[list[str], str]]:
    text = DOC.read_text()
    section = text[text.index("Where to add things") : text.index("## Layers")]
    recipes = {}
    for item in re.split(r"\n- ", section)[1:]:
        item = " ".join(item.split())
        m = re.match(r"\*\*(.+?)\*\* \(files: (.+?); example: `([^`]+)`\)", item)
        assert m, f"a recipe without (files: ...; example: ...): {item[:80]}"
        files = re.findall(r"`([^`]+)`", m.group(2))
        recipes[m.group(1)] = (files, m.group(3))
    return recipes


RECIPES = _recipes()


def _pattern(file: str) -> str:
    """A recipe's file as a glob: ``autofunc/hops/<kind>.py`` -> ``autofunc/hops/*.py``."""
    return re.sub(r"<[^>]+>", "*", file)


def _module_file(dotted: str) -> str:
    """``autofunc.passes.rules`` -> ``autofunc/passes/rules.py``."""
    path = Path(*dotted.split("."))
    return f"{path}.py" if (ROOT / f"{path}.py").exists() else f"{path}/__init__.py"


def _test_function(example: str) -> ast.FunctionDef:
    path, name = example.split("::")
    tree = ast.parse((ROOT / path).read_text())
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert fns, f"{example} does not exist"
    return fns[0]


def _imported_modules(path: Path) -> dict[str, str]:
    """Local name -> the autofunc module it names, for ``import a.b as x`` / ``from a import b``."""
    names = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if (ROOT / Path(*full.split("."))).with_suffix(".py").exists():
                    names[a.asname or a.name] = full
        elif isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name
    return names


def _patched_files(example: str) -> set[str]:
    """The autofunc files whose attributes or tables the example patches (``monkeypatch``)."""
    path = ROOT / example.split("::")[0]
    modules = _imported_modules(path)
    patched = set()
    for node in ast.walk(_test_function(example)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setattr", "setitem")
            and node.args
        ):
            continue
        target = node.args[0]
        while isinstance(target, ast.Attribute):  # rules.RULES -> rules
            target = target.value
        if isinstance(target, ast.Name) and target.id in modules:
            patched.add(_module_file(modules[target.id]))
    return patched


def test_the_recipes_are_written_as_the_test_reads_them():
    assert set(RECIPES) >= {"A rule", "A node kind", "A view step", "A backend", "A kernel"}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_recipes_files_and_example_exist(recipe):
    files, example = RECIPES[recipe]
    for f in files:
        assert list(ROOT.glob(_pattern(f))), f"{recipe}: {f} matches no file"
    _test_function(example)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_an_example_changes_only_its_recipes_files(recipe):
    files, example = RECIPES[recipe]
    allowed = {p.relative_to(ROOT).as_posix() for f in files for p in ROOT.glob(_pattern(f))}
    assert _patched_files(example) <= allowed, (recipe, _patched_files(example), allowed)


def test_the_checker_sees_a_patch():
    # the rule's example patches ``rules.RULES``: the checker must see it, else the check above
    # passes whatever the example does
    assert _patched_files(RECIPES["A rule"][1]) == {"autofunc/passes/rules.py"}

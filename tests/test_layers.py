"""The package's import graph matches the layers in docs/architecture.md: every import of one
part from another goes down a layer (lazy imports included), and no module-level imports form
a circle."""

import ast
from pathlib import Path

import autofunc

ROOT = Path(autofunc.__file__).parent

LAYERS = [
    {"logs"},
    {"errors", "symbolic", "compiler_imports", "reports", "source_key"},
    {"schema", "views"},
    {"regions"},
    {"hops"},
    {"guards"},
    {"passes", "registry"},
    {"backends", "testing"},
    {"inductor", "explain"},
    {"__init__"},
    {"bench", "integrations"},
    {"cli"},
    {"__main__"},
]
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(name: str, path: Path, mods: dict, top_only: bool) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    out = set()
    for node in _top_level(tree) if top_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in mods else target)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in mods and m != name}


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's own statements, with those of its ``if TYPE_CHECKING:`` blocks: a circle
    that only a type checker sees still makes two modules one."""
    out = []
    for node in tree.body:
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += node.body
    return out


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_has_a_layer():
    mods = _modules()
    assert {_part(m) for m in mods} <= set(LAYER), {_part(m) for m in mods} - set(LAYER)


def test_imports_go_down_the_layers():
    mods = _modules()
    wrong = [
        f"{m} imports {d}"
        for m, path in mods.items()
        for d in _imports(m, path, mods, top_only=False)
        if _part(d) != _part(m) and LAYER[_part(d)] >= LAYER[_part(m)]
    ]
    assert not wrong, wrong


def test_no_import_circles():
    mods = _modules()
    graph = {m: _imports(m, p, mods, top_only=True) for m, p in mods.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, " -> ".join([*path, m, d])
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_every_module_declares_all():
    missing = [m for m, p in _modules().items() if "__all__" not in _assigned(p)]
    assert not missing, missing


def test_no_private_name_crosses_modules():
    # A name another module imports is public within the package (house style: ``_`` means
    # "this module's own"). The kernels' ``@triton.jit`` functions keep their ``_<name>_kernel``
    # names (house style, kernels), which the benchmarks launch directly.
    mods = _modules()
    crossing = []
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            internal = isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("autofunc")
            )
            crossing += [
                f"{m} imports {a.name} from {'.' * node.level}{node.module or ''}"
                for a in (node.names if internal else ())
                if a.name.startswith("_") and not a.name.startswith("__")
                if not (a.name.endswith("_kernel") and "kernels" in (node.module or ""))
            ]
    assert not crossing, crossing


def _assigned(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _imported_names(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in ``path`` names (lazy and
    ``TYPE_CHECKING`` imports included), relative ones resolved to ``autofunc.<...>``."""
    name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            out |= {target} | {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_the_pass_knows_no_backend():
    # The backend-neutral pass asks a Policy; what knows Inductor lives in backends/inductor.
    wrong = [
        f"{path.relative_to(ROOT)} imports {m}"
        for path in sorted((ROOT / "passes").rglob("*.py"))
        for m in sorted(_imported_names(path))
        if m.startswith(("autofunc.backends", "torch._inductor", "autofunc.inductor"))
    ]
    assert not wrong, wrong


def test_no_module_over_500_lines():
    # A module holds one concern; past 500 lines it holds two (the alias analysis is three
    # modules: building and queries, reads meeting writes, shifted versions).
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, long

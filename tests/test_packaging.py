"""What ships: ``kernels/`` inside the wheel as ``autofunc.kernels``, claiming no top-level name;
the wheel holds the library, its CLI and the user-facing benchmark, and no test tooling (the
corpus, the fuzzer, the conformance harness and the developer tools live in ``tools/``)."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = (
    "import importlib.util, autofunc.kernels as k; "
    "assert importlib.util.find_spec('kernels') is None, 'top-level kernels is importable'; "
    "print(k.__file__)"
)


def test_editable_install_imports_kernels_under_autofunc(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).parent == ROOT / "kernels"


def test_regular_install_imports_kernels_under_autofunc(tmp_path):
    pytest.importorskip("setuptools")
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*pip, "--target", str(target), str(ROOT)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (target / "kernels").exists()
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).is_relative_to(target)


# -- the wheel: the library, its CLI and the user-facing benchmark; no test tooling -------------

# What a build leaves behind or only a developer has: not copied to the build folder (a stale
# build/lib would otherwise slip old modules into the wheel).
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
    ".hypothesis", "results", "campaign-out", "bench-results", "fuzz-failures",
)  # fmt: skip

# Run in the installed copy: import every module of the wheel and record the namespace of every
# torch.library.Library created by a file of the package (custom ops included: each makes one).
# Frames in torch.library / torch._library are the registration machinery, not the registrant.
IMPORT_ALL = r"""
import importlib, json, os, sys
import torch, torch.library

package = os.path.dirname(importlib.util.find_spec("autofunc").origin)
machinery = (torch.library.__file__, os.path.dirname(torch.library.__file__) + "/_library/")
owned = {}
real_init = torch.library.Library.__init__

def init(self, ns, *args, **kwargs):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(machinery):
        frame = frame.f_back
    where = frame.f_code.co_filename if frame is not None else ""
    if where.startswith(package + os.sep):
        owned.setdefault(ns, os.path.relpath(where, package))
    real_init(self, ns, *args, **kwargs)

torch.library.Library.__init__ = init
for name in sys.argv[1:]:
    importlib.import_module(name)
corpus = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("autofunc_corpus::")]
print(json.dumps({"package": package, "owned": owned, "corpus_ops": corpus}))
"""

# The library's own op namespaces: the helper ops of the pass and the shipped kernels.
OWN_NAMESPACES = {"autofunc", "autofunc_kernels"}


def test_wheel_holds_the_library_and_registers_no_tooling_ops(tmp_path):
    pytest.importorskip("setuptools")
    src, dist, site = tmp_path / "src", tmp_path / "dist", tmp_path / "site"
    shutil.copytree(ROOT, src, ignore=_NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*pip, "-w", str(dist), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = dist.glob("autofunc-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(site)  # a pure-Python wheel: unpacking it is installing it
    modules = [n for n in names if n.endswith(".py")]
    top = {n.split("/")[0] for n in names}  # no tools/, tests/ or top-level kernels/
    assert top == {"autofunc", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "autofunc/cli.py" in modules and "autofunc/bench/compile_time.py" in modules
    tooling = ("corpus", "compare", "fuzz", "conformance", "conf_", "profile_pass", "guard_")
    assert not [n for n in modules if any(t in n.rsplit("/", 1)[-1] for t in tooling)]

    imports = [n[:-3].replace("/", ".").removesuffix(".__init__") for n in modules]
    imports = [m for m in imports if not m.endswith("__main__")]  # that one runs the CLI
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *imports],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(seen["package"]) == site / "autofunc"  # the unpacked wheel, not the checkout
    assert set(seen["owned"]) <= OWN_NAMESPACES, seen["owned"]
    assert "autofunc_kernels" in seen["owned"]  # the recording sees the kernels' custom ops
    assert seen["corpus_ops"] == []


# -- a clone named autofunc, run from the folder above it ------------------------------------------

SHADOW_SCRIPT = (
    "import autofunc\nprint(autofunc.__file__)\nprint(autofunc.functionalize.__name__)\n"
)


def _clone_beside_a_script(tmp_path: Path) -> Path:
    """``tmp_path/autofunc``: the clone as ``git clone`` names it, next to a user's script."""
    (tmp_path / "autofunc").symlink_to(ROOT, target_is_directory=True)
    (tmp_path / "script.py").write_text(SHADOW_SCRIPT)
    return tmp_path / "script.py"


def test_the_clone_folder_hands_over_to_the_installed_package(tmp_path):
    # Before the root __init__.py: an empty namespace package, "module 'autofunc' has no
    # attribute 'functionalize'" (with the editable install, whose finder comes after sys.path).
    script = _clone_beside_a_script(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the install
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    where, name = out.stdout.split()
    assert name == "functionalize"
    assert Path(where).name == "__init__.py" and Path(where).parent.name == "autofunc"
    assert Path(where).resolve() != ROOT / "__init__.py"


def test_the_clone_folder_without_an_install_says_what_happened(tmp_path):
    script = _clone_beside_a_script(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(  # -S: no site-packages, so no installed autofunc
        [sys.executable, "-S", str(script)], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: `import autofunc` found ")
    assert f"{tmp_path / 'autofunc'}, the folder of an autofunc clone" in last
    assert "no installed autofunc was found" in last and "pip install -e" in last

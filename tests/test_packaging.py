"""``kernels/`` ships inside the wheel as ``autofunc.kernels`` and claims no top-level name."""

import subprocess
import sys

import pytest

from pathlib import Path

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
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, %r); " % str(target) + CHECK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()).is_relative_to(target)

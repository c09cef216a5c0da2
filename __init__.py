"""The guard against importing the clone's folder instead of autofunc (not part of the package).

A clone is named ``autofunc`` (``git clone .../autofunc``) and holds the package in
``autofunc/autofunc``. Run a script or ``python -c`` from the folder *above* the clone and that
folder comes first on ``sys.path``: without this file ``import autofunc`` found the clone's
folder, took it for an empty namespace package, and failed later with ``module 'autofunc' has no
attribute 'functionalize'``. This file makes the clone's folder a regular package instead, so
that it is the one imported, and it hands the import over to the real package:

* it looks for ``autofunc`` again on ``sys.path`` less the entries through which this file was
  found (so the installed package: the editable install of this very clone, or a regular
  install) and puts that module in ``sys.modules``, where ``import autofunc`` takes it from;
* where there is none, it raises ``ImportError`` naming the clone's folder and how to fix it.

A clone under another name is not touched (its folder stays an empty package). Nothing else
imports this file: the wheel lists its packages (``pyproject.toml``), pytest imports
the tests by their own folders (``tests/`` has no ``__init__.py``), and ``python -m tools.x`` from
the root finds ``tools`` on its own.
"""

import importlib
import os
import sys

_CLONE = os.path.dirname(os.path.abspath(__file__))


def _through_this_file(entry: str) -> bool:
    """Whether ``import autofunc`` through the ``sys.path`` entry finds this file."""
    found = os.path.join(entry or os.getcwd(), os.path.basename(_CLONE), "__init__.py")
    return os.path.realpath(found) == os.path.realpath(__file__)


def _import_the_package() -> object:
    name = __name__
    saved_path = sys.path[:]
    sys.path[:] = [p for p in sys.path if not _through_this_file(p)]
    del sys.modules[name]
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        module = None
    finally:
        sys.path[:] = saved_path + [p for p in sys.path if p not in saved_path]
    if module is None or os.path.realpath(getattr(module, "__file__", "")) == os.path.realpath(
        __file__
    ):
        raise ImportError(
            f"`import {name}` found {_CLONE}, the folder of an autofunc clone, because the "
            f"folder above it is on sys.path (the current directory, or the folder of the script "
            f"being run); no installed autofunc was found. Install the clone (pip install -e "
            f"{_CLONE}, or run {_CLONE}/scripts/setup.sh and use its .venv), or run from another "
            f"folder with {_CLONE} on PYTHONPATH.",
            name=name,
        )
    return module


if __name__ == "autofunc":  # a clone under another name stays an empty package, as it was
    sys.modules[__name__] = _import_the_package()

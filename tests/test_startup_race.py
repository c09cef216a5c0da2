"""A registration racing the process's first ``torch.compile`` in another thread never breaks
either (Note [Importing the compiler beside a first compile] in autofunc/compiler_imports.py).

The race is in Python's import locks, so it only shows in a fresh process: each case runs
``startup/race_program.py`` in one, two at a time, over both ways ``torch.compile`` enters the
compiler (a backend named, none given) and start offsets of a few milliseconds either way.
Before the fix 5 of 6 such runs failed on this machine.
"""

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RUNS = 20
CASES = [
    (backend, delay_ms)
    for delay_ms in (0, 0, 1, -1, 3, -3, 6, -6, 10, -10)
    for backend in ("inductor", "default")
][:RUNS]


def _fresh_env(cache: Path) -> dict:
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # shared by the runs: one C++ build
    env.pop("TORCH_LOGS", None)
    return env


def test_registration_racing_first_compile(tmp_path):
    env = _fresh_env(tmp_path / "inductor-cache")

    def run(case):
        backend, delay_ms = case
        proc = subprocess.run(
            [sys.executable, str(HERE / "startup" / "race_program.py"), backend, str(delay_ms)],
            env=env, capture_output=True, text=True, timeout=300,
        )
        return case, proc

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, CASES))
    failed = [
        f"{case}: rc={proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        for case, proc in results
        if proc.returncode != 0 or "OK" not in proc.stdout
    ]
    assert not failed, f"{len(failed)} of {len(CASES)} runs failed:\n" + "\n".join(failed)


def test_the_glue_imports_nothing_of_the_compiler_beyond_the_entry_modules():
    # Whatever autofunc imports of Dynamo and Inductor when first used must be loaded by
    # import_compiler() (under its lock), not by a module-level import after it.
    code = textwrap.dedent(
        """
        import sys
        import autofunc
        from autofunc.compiler_imports import import_compiler
        import_compiler()
        before = set(sys.modules)
        import autofunc.inductor, autofunc.hops.triton, autofunc.testing, autofunc.explain
        new = sorted(m for m in set(sys.modules) - before
                     if m.startswith(("torch._dynamo", "torch._inductor")))
        print(new)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_import_compiler_waits_for_an_import_in_flight(tmp_path, monkeypatch):
    # Another thread is inside a module's import (its body blocks until released): the
    # compiler's import starts only once that import has ended.
    from autofunc import compiler_imports

    (tmp_path / "af_slow_module.py").write_text(
        "import threading, builtins\n"
        "builtins._af_entered.set()\n"
        "builtins._af_release.wait(30)\n"
        "DONE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    builtins._af_entered, builtins._af_release = threading.Event(), threading.Event()
    order = []
    importer = threading.Thread(target=lambda: (__import__("af_slow_module"), order.append("import")))
    importer.start()
    try:
        assert builtins._af_entered.wait(30)

        def enter():
            with compiler_imports._imports_of_this_thread_only():
                order.append("compiler")

        waiter = threading.Thread(target=enter)
        waiter.start()
        time.sleep(0.2)
        assert order == []  # still waiting for the import in flight
        builtins._af_release.set()
        waiter.join(30)
        importer.join(30)
        assert order == ["import", "compiler"]
    finally:
        builtins._af_release.set()
        importer.join(30)
        sys.modules.pop("af_slow_module", None)
        del builtins._af_entered, builtins._af_release


def test_import_compiler_does_not_wait_for_a_thread_waiting_for_it(tmp_path, monkeypatch):
    # A thread blocked on a module this thread is importing waits for us: no hang.
    from autofunc import compiler_imports

    (tmp_path / "af_outer_module.py").write_text(
        "import builtins, threading\n"
        "t = threading.Thread(target=lambda: __import__('af_outer_module'))\n"
        "t.start()\n"
        "import time; time.sleep(0.2)  # t now waits on this module's lock\n"
        "from autofunc import compiler_imports\n"
        "with compiler_imports._imports_of_this_thread_only():\n"
        "    builtins._af_inside = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    start = time.monotonic()
    __import__("af_outer_module")
    try:
        assert builtins._af_inside
        assert time.monotonic() - start < compiler_imports.WAIT_LIMIT_S / 2
    finally:
        sys.modules["af_outer_module"].t.join(30)
        sys.modules.pop("af_outer_module", None)
        del builtins._af_inside


def test_state_another_thread_is_half_way_through_building_is_finished_first(tmp_path):
    # Another thread is half-way through reading sysconfig's variables (stopped before the
    # import in the middle of it) when the compiler's import starts; a module imported then
    # reads a variable set after that import. It must see the value, not a half-filled
    # dictionary (3.10-3.11) or wait forever (3.12+). Note [State another thread is half-way
    # through building] in autofunc/compiler_imports.py.
    (tmp_path / "af_reads_sysconfig.py").write_text(
        "import sysconfig\nEXE = sysconfig.get_config_var('EXE')\n"
    )
    code = textwrap.dedent(
        """
        import sys, sysconfig, threading
        from autofunc import compiler_imports

        expected = sysconfig.get_config_var("EXE")
        assert expected is not None
        sysconfig._CONFIG_VARS = None
        if hasattr(sysconfig, "_CONFIG_VARS_INITIALIZED"):
            sysconfig._CONFIG_VARS_INITIALIZED = False
        entered, release = threading.Event(), threading.Event()
        original = sysconfig._init_posix

        def half_way(config):
            entered.set()
            release.wait(30)
            original(config)

        sysconfig._init_posix = half_way
        reader = threading.Thread(target=sysconfig.get_config_vars)
        reader.start()
        assert entered.wait(30)
        threading.Timer(0.3, release.set).start()
        compiler_imports.ENTRY_MODULES = ("af_reads_sysconfig",)
        compiler_imports.import_compiler()
        reader.join(30)
        import af_reads_sysconfig
        print(af_reads_sysconfig.EXE == expected)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(HERE.parent)]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"

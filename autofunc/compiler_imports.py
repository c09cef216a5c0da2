"""Loading Dynamo and Inductor so that no import in another thread can break it, or be broken.

``import autofunc`` does not import Dynamo or Inductor (about a second); the first registration,
the first functionalized call, ``explain`` or the first use of the Inductor glue does
(Note [Inductor imported when first needed] in ``autofunc/__init__.py``). Every such place calls
:func:`import_compiler` before it imports anything of ``torch._dynamo`` or ``torch._inductor``.
Imports nothing of autofunc; any layer may call it.

Note [Importing the compiler beside a first compile]
Python takes a lock per module while it runs the module's code, and it takes a submodule's lock
*before* its parent's. ``torch._dynamo`` and ``torch._inductor`` import each other half-way
through, and ``torch.compile`` enters them through Dynamo's backend registry (no backend given)
or through Inductor (``backend="inductor"``). Two threads that enter the pair through two
different modules can each hold a lock the other waits for; Python detects that and hands one
of them a partially initialised module. A registration racing the first compile in another
thread then failed both (seen as ``ImportError ... partially initialized module``,
``_DeadlockError``, ``KeyError: 'torch._dynamo'``, in most runs), and no single order of entry
avoids it, since ``torch.compile`` itself uses two.

So the import runs alone: :func:`import_compiler` waits until no other thread holds a module
lock (an import in flight, read off ``importlib._bootstrap``'s lock table; a thread blocked on
a module this thread is importing does not count, it waits for us), then holds the interpreter's
global import lock, which every other thread needs to *start* importing a module, while it
imports :data:`ENTRY_MODULES`. Nothing it needs is then held by anyone else, and nobody can
start an import it would need: no circle can form. Other threads' imports wait for it (a second
or two, once per process), as they did under Python 2's one import lock. Where the interpreter
lacks that table (another implementation), or other imports have not ended after
:data:`WAIT_LIMIT_S`, it imports as plain Python would: never a hang, at worst the old race.
``tests/test_startup_race.py`` races a registration against a first compile in fresh
processes.

Note [State another thread is half-way through building]
Holding the global import lock stops every other thread at its next import, wherever it is:
possibly half-way through building some lazily made state whose building imports a module.
What the compiler's modules read of such state must therefore be complete before the lock is
taken. One case bites: ``sysconfig``'s configuration variables. ``get_config_vars()`` fills its
dictionary in place and imports ``_sysconfigdata_*`` in the middle; Triton's ``knobs`` (imported
by Dynamo) reads ``get_config_var("EXE")`` while being imported. On Python 3.10-3.11 a thread
stopped half-way leaves a dictionary without that key (``TypeError: can only concatenate str
(not "NoneType") to str`` in ``knobs``, once in 20 runs of the race test in CI); on 3.12+ it
holds sysconfig's lock, so the import would wait for it forever. :func:`_settle_shared_state`
therefore reads the variables first, without the import lock, and waits (up to
:data:`WAIT_LIMIT_S`) until another thread's reading of them has ended.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import time
from collections.abc import Iterator

__all__ = ["ENTRY_MODULES", "WAIT_LIMIT_S", "import_compiler"]

#: What autofunc imports of the compiler; the rest of its glue imports only what these load.
ENTRY_MODULES = (
    "torch._dynamo",
    "torch._dynamo.backends.registry",
    "torch._inductor",
    "torch._inductor.config",
    "torch._inductor.custom_graph_pass",
    "torch._higher_order_ops.triton_kernel_wrap",
)

#: How long to wait for other threads' imports to end before importing anyway.
WAIT_LIMIT_S = 60.0

_done = False


def import_compiler() -> None:
    """Import :data:`ENTRY_MODULES` with no other import in flight (idempotent; free once
    done; Note [Importing the compiler beside a first compile])."""
    global _done
    if _done:
        return
    with _imports_of_this_thread_only():
        for name in ENTRY_MODULES:
            importlib.import_module(name)
    _done = True


@contextlib.contextmanager
def _imports_of_this_thread_only() -> Iterator[None]:
    """Hold the global import lock once no other thread is importing (see the Note)."""
    try:
        import _imp
        from importlib import _bootstrap

        locks, blocking = _bootstrap._module_locks, _bootstrap._blocking_on
    except (ImportError, AttributeError):  # pragma: no cover - not CPython's import system
        yield
        return
    me = threading.get_ident()
    deadline = time.monotonic() + WAIT_LIMIT_S
    _settle_shared_state(deadline)
    while True:
        _imp.acquire_lock()
        try:
            busy = _others_importing(locks, blocking, me)
        except Exception:  # noqa: BLE001 - a lock table of another shape: do not wait
            busy = False
        if not busy or time.monotonic() > deadline:
            break
        _imp.release_lock()
        time.sleep(0.002)
    try:
        yield
    finally:
        _imp.release_lock()


def _settle_shared_state(deadline: float) -> None:
    """Have state that the compiler's modules read at import complete before the import lock
    is taken (Note [State another thread is half-way through building])."""
    import sysconfig

    # 3.12+: waits on sysconfig's lock for another thread's reading. 3.10-3.11: returns the
    # dictionary as far as another thread has filled it; its last key marks the end.
    config = sysconfig.get_config_vars()
    while "srcdir" not in config and time.monotonic() < deadline:
        time.sleep(0.002)


def _others_importing(locks: dict, blocking: dict, me: int) -> bool:
    """Whether a thread other than ``me`` holds a module lock and is not waiting for one of
    ``me``'s (read under the global import lock, so the table cannot change meanwhile)."""
    held = [lock for ref in list(locks.values()) if (lock := ref()) is not None]
    mine = {id(lock) for lock in held if lock.owner == me}
    for lock in held:
        owner = lock.owner
        if owner is None or owner == me:
            continue
        waits_for = blocking.get(owner)
        waits_for = waits_for if isinstance(waits_for, list) else [waits_for]  # 3.12+: a list
        if not any(w is not None and id(w) in mine for w in waits_for):
            return True
    return False

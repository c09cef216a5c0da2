"""Dynamo glue: compiled code is guarded on autofunc's registrations.

Which HOP functionalization emits for a custom op (autofunc v1, v2 or PyTorch's own) is decided
when a frame is compiled, so a frame compiled under one set of registrations must not be reused
under another. :func:`guard_current_compile` adds a guard saying so to the Dynamo compile in
progress (if any). Imports torch only; the registry hands in the state to compare.

Note [Guarding on the registrations]
Dynamo offers no public hook for a global guard, but every frame's guards are collected in the
``TracingContext`` while its graph is compiled, and AOTAutograd and Inductor run inside that
compile. autofunc code that runs there (the functionalization rule of a registered op, the
Inductor pass's cache key) adds one ``Guard`` on ``GlobalStateSource`` whose builder installs a
lambda guard comparing the registry's state token with the one current when the guards are
built (right after the compile). Restoring the registrations (``autofunc.override``,
``explain``) makes the old entries valid again, so nothing recompiles needlessly. A frame
compiled before its op was registered at all ran none of autofunc's code and has no guard, nor
has one compiled while no op was registered whose graph came from AOTAutograd's or Inductor's
cache (functionalization did not run, and without a registration the Inductor pass, whose
cache key adds the guard, is not installed): ``register`` drops the compiled code of every
frame instead when it registers an op for the first time or the first op of an empty registry
(see ``registry.register``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .compiler_imports import import_compiler
from .logs import get_logger

__all__ = ["compile_lock", "drop_compiled_code", "guard_current_compile"]

log = get_logger("autofunc.guards")


def guard_current_compile(token: Callable[[], Any]) -> bool:
    """Guard the Dynamo frame being compiled (if any) on ``token()`` keeping its value.

    Returns whether a guard was added. Under ``torch.export`` nothing is added: an exported
    program has no Dynamo cache entry to invalidate.
    """
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    if ctx is None or _exporting():
        return False
    guards = getattr(getattr(ctx, "guards_context", None), "dynamo_guards", None)
    if guards is None:
        return False
    try:
        from torch._dynamo.source import GlobalStateSource
        from torch._guards import Guard
    except ImportError:  # pragma: no cover - a torch without these cannot be guarded
        return False
    # Note [One registrations guard per frame]
    # Every call of a registered op in the frame lands here. A fresh Guard each time would not be
    # found in the set (Guard compares all its fields, and the set's copy has its debug stacks
    # filled in), so the frame would get one lambda guard per op call, every one of them
    # evaluated on every call of the compiled code. The guard last added is kept and looked up
    # by identity; a new one (with fresh debug stacks) is made only for a set without it.
    last, inner = _last_guard.get(id(token)), getattr(guards, "inner", None)
    if last is not None and inner is not None and last in inner:
        return True
    guard = Guard(GlobalStateSource(), _builder_for(token))
    guards.add(guard)
    _last_guard[id(token)] = guard
    return True


_builders: dict[int, Callable] = {}
_last_guard: dict[int, Any] = {}  # id(token) -> the Guard last added for it


def _builder_for(token: Callable[[], Any]) -> Callable:
    # One builder function per token source: Dynamo deduplicates guards by the builder's id.
    builder = _builders.get(id(token))
    if builder is None:

        def autofunc_registrations(builder_: Any, guard: Any) -> None:
            expected = token()
            parts = [f"autofunc registrations == {expected!r}"]
            root = builder_.guard_manager.root
            check = lambda _: token() == expected  # noqa: E731
            try:
                root.add_lambda_guard(check, parts, getattr(guard, "user_stack", None))
            except TypeError:  # torch builds whose lambda guards take no user stack
                root.add_lambda_guard(check, parts)

        builder = _builders[id(token)] = autofunc_registrations
    return builder


def _exporting() -> bool:
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())


def drop_compiled_code() -> int:
    """Drop Dynamo's compiled code of every frame compiled so far (its guards and graphs);
    each frame recompiles on its next call. Returns how many code objects had some."""
    import_compiler()  # Note [Importing the compiler beside a first compile]
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, reset_code
    from torch._dynamo import convert_frame

    dropped = 0
    with convert_frame.compile_lock:
        for ref in list(convert_frame.input_codes.seen):
            code = ref() if callable(ref) else ref  # weak references in recent torch
            if code is None:
                continue
            if _debug_get_cache_entry_list(code):
                dropped += 1
            reset_code(code)
    if dropped:
        log.info("dropped the compiled code of %d frames", dropped)
    return dropped


def compile_lock() -> Any:
    """Dynamo's lock around compiling a frame (a re-entrant lock), taken by every change of the
    registrations.

    Note [Registrations wait for compiles]
    A frame's functionalization decides each call by the registrations current at that moment,
    and its guard on the registrations is built once the compile ends (Note [Guarding on the
    registrations]). A registration changed by another thread in between left the frame's code
    guarded as valid for a state it was not compiled under: a graph of PyTorch's
    ``auto_functionalized_v2`` for an op that then had autofunc's Functionalize kernel, whose
    run raised "Cannot auto-functionalize op". Dynamo holds this lock for a whole frame
    compile, tracing, backend and guards included, so a registration change waits for a
    compile in flight, and the frames compiled before it are guarded on the state they saw.
    The same thread may hold it already (a registration inside a backend). A change does not
    wait for compiled calls that are running: those run on as compiled (Note [PyTorch's nodes
    run beside the Functionalize kernel] in registry/routing.py).
    """
    import_compiler()  # Note [Importing the compiler beside a first compile]
    from torch._dynamo import convert_frame

    return convert_frame.compile_lock

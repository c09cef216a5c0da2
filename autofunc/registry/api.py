"""``register()``: route a mutable custom op's functionalization to an autofunc HOP.

The public side of the registry: ``register``, ``functionalize`` and ``override``, the
:class:`Registration` handles, what is registered, the check of the ops they name (no core
PyTorch op) and the release hooks. What a registration installs and what reads it on every call
live in ``routing.py``; the state itself in ``state.py``. Imports no backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket

from .. import guards
from ..errors import AutofuncError, UnsupportedOpError
from ..schema import OpInfo, op_info, qualname, resolve
from .routing import registry_state, route, run_backend_hooks
from .state import STRATEGIES
from ..logs import get_logger

__all__ = [
    "Registration",
    "add_release_hook",
    "functionalize",
    "override",
    "register",
    "registered_strategy",
    "registrations",
    "release_if_unused",
]

log = get_logger("autofunc.registry")


@dataclasses.dataclass
class Registration:
    """Returned by :func:`register`; ``remove()`` undoes exactly that registration."""

    ops: tuple[str, ...]
    strategy: str
    _generation: int

    def remove(self) -> None:
        with guards.compile_lock():  # Note [Registrations wait for compiles]
            for name in self.ops:
                registry_state.release(name, self._generation)
            release_if_unused()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def registrations() -> dict[str, str]:
    """``{op qualname: strategy}`` of every op autofunc currently functionalizes."""
    return registry_state.strategies()


def registered_strategy(op: OpOverload | str) -> str | None:
    """The strategy ``op`` is registered with, or ``None``."""
    return registry_state.strategy(op if isinstance(op, str) else qualname(op))


def register(
    op: Any, *, strategy: str = "v2", cpp_functionalize: bool | None = None
) -> Registration:
    """Functionalize ``op`` with autofunc's HOP of ``strategy`` from now on.

    Args:
        op: a ``CustomOpDef`` (what ``@torch.library.custom_op`` returns), an ``OpOverload``, an
            ``OpOverloadPacket`` (all of its overloads) or a name ``"ns::name"`` /
            ``"ns::name.overload"``.
        strategy: ``"v1"`` (clone every mutable argument) or ``"v2"`` (clone their bases).
        cpp_functionalize: whether to install the op's ``Functionalize``-key kernel, which C++
            functionalization (``torch.func.functionalize``) needs. ``None`` (the default):
            for ops that return nothing; an op that returns tensors gets it only when asked
            (Note [The Functionalize kernel and Inductor] in routing.py).

    Returns:
        A :class:`Registration`; its ``remove()`` restores PyTorch's default handling. Registering
        an op again replaces its strategy.

    Raises:
        AutofuncError: unknown strategy or op name.
        UnsupportedOpError: the schema of one of the overloads is not supported (raised before
            anything is registered, naming the op and the argument).
    """
    return _register(op, strategy, cpp_functionalize, "autofunc.register")


def _register(op: Any, strategy: str, cpp_functionalize: bool | None, who: str) -> Registration:
    """:func:`register`, its errors naming ``who``: the call the user made."""
    infos = _infos(op, who, strategy)
    with guards.compile_lock():  # Note [Registrations wait for compiles]
        gen = registry_state.new_generation()
        unguarded = not registry_state.strategies()  # frames compiled now may lack the guard
        for info in infos:
            unguarded |= route(info, cpp_functionalize)
            registry_state.claim(info.qualname, strategy, gen)
            log.debug("registered %s with strategy %s", info.qualname, strategy)
        if unguarded:
            # Frames compiled before this op was ever registered ran no autofunc code, and a
            # frame compiled while no op was registered may have come from a cache without
            # running any: either carries no guard on the registrations (Note [Guarding on the
            # registrations]). Recompile them.
            guards.drop_compiled_code()
        run_backend_hooks()
    return Registration(tuple(i.qualname for i in infos), strategy, gen)


@contextlib.contextmanager
def override(strategy: str | None, ops: Iterable[Any] = ()):
    """Use ``strategy`` for ``ops`` (default: every registered op) inside the ``with`` block,
    then restore the registrations of those ops exactly as they were (strategy, owning handle,
    Functionalize kernel: a :class:`RegistrySnapshot` taken on entry); other ops registered or
    removed inside the block stay so.

    ``strategy=None`` hands ``ops`` to PyTorch's built-in handling for the block. Registration
    handles taken before stay valid (their ``remove()`` still works afterwards), and frames
    compiled before the block are not recompiled after it: they are guarded on the
    registrations, which the block restores.

    Raises:
        AutofuncError, UnsupportedOpError: as :func:`register`.
    """
    ops = list(ops)
    infos = (
        _infos(ops, "autofunc.override", strategy or "v2")
        if ops
        else [op_info(resolve(name)) for name in registry_state.strategies()]
    )
    lock = guards.compile_lock()  # Note [Registrations wait for compiles]: each change, not the
    with lock:  # block (compiles in the block run in this thread or wait for the change alone)
        saved = registry_state.snapshot(i.qualname for i in infos)
    try:
        with lock:
            if strategy is not None and not registry_state.strategies():
                guards.drop_compiled_code()  # as in _register: frames that may lack the guard
            for info in infos:
                if strategy is not None:
                    # An op keeps the Functionalize kernel it has (registered on request).
                    route(info, True if registry_state.has_kernel(info.qualname) else None)
                else:
                    # PyTorch's functionalization hands an op with a Functionalize kernel to
                    # that kernel (autofunc's) instead of functionalizing it itself.
                    registry_state.use_kernel(info.qualname, False)
                registry_state.set_strategy(info.qualname, strategy)
            if strategy is not None:
                run_backend_hooks()
        yield
    finally:
        with lock:
            registry_state.restore(saved)


def _infos(op: Any, who: str, strategy: str) -> list[OpInfo]:
    if strategy not in STRATEGIES:
        raise AutofuncError(f"{who}: strategy must be one of {STRATEGIES}, got {strategy!r}")
    ops = op if isinstance(op, (list, tuple)) else [op]
    # Validate every overload before touching anything.
    overloads = [o for one in ops for o in _overloads(one, who)]
    for o in overloads:
        if o.namespace in _CORE_NAMESPACES:
            raise UnsupportedOpError(
                qualname(o),
                f"it is a core PyTorch op ({o.namespace}), and autofunc is for custom ops",
                hint="PyTorch functionalizes its own ops; registering one would replace its "
                "Functionalize kernel for the whole process and hide every call of it from "
                "Inductor's fusion",
            )
    return [op_info(o) for o in overloads]


# Namespaces of PyTorch's own ops, which functionalization already handles.
_CORE_NAMESPACES = frozenset(
    {"aten", "prims", "prim", "_c10d_functional", "c10d", "c10d_functional"}
)


# Backends whose setup should go once no op is registered any more (Inductor: the pass leaves
# ``post_grad_custom_post_pass`` as the user had it). Each hook decides for itself whether
# something else still needs it (the Triton switch).
_release_hooks: list[Callable[[], None]] = []


def add_release_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` whenever the last registration is removed (idempotent per hook)."""
    if hook not in _release_hooks:
        _release_hooks.append(hook)


def release_if_unused() -> None:
    """Run the release hooks when no op is registered."""
    if not registry_state.strategies():
        for hook in _release_hooks:
            hook()


def functionalize(
    op: Any = None, *, strategy: str = "v2", cpp_functionalize: bool | None = None
) -> Any:
    """Decorator form of :func:`register`, stacked on ``@torch.library.custom_op``::

        @autofunc.functionalize(strategy="v2")
        @torch.library.custom_op("mylib::write", mutates_args={"out"})
        def write(out: torch.Tensor, x: torch.Tensor) -> None: ...

    Returns the op unchanged (its registration handle is at ``op.autofunc_registration``).
    """

    def wrap(o: Any) -> Any:
        handle = _register(o, strategy, cpp_functionalize, "autofunc.functionalize")
        try:
            o.autofunc_registration = handle
        except AttributeError:
            pass
        return o

    return wrap if op is None else wrap(op)


def _overloads(op: Any, who: str) -> Iterable[OpOverload]:
    """The overloads ``op`` names; a bad ``op`` raises AutofuncError naming ``who``."""
    if isinstance(op, OpOverload):
        return [op]
    if isinstance(op, OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    opoverload = getattr(op, "_opoverload", None)  # CustomOpDef
    if isinstance(opoverload, OpOverload):
        return [opoverload]
    if isinstance(op, str):
        ns, sep, rest = op.partition("::")
        name, _, overload = rest.partition(".")
        packet = getattr(getattr(torch.ops, ns, None), name, None) if sep else None
        if packet is None:
            raise AutofuncError(
                f"{who}: no op named {op!r} (expected 'ns::name[.overload]'){_closest(op)}"
            )
        if overload and overload not in packet.overloads() and overload != "default":
            raise AutofuncError(
                f"{who}: op {ns}::{name} has no overload {overload!r} "
                f"(it has {', '.join(packet.overloads())})"
            )
        return _overloads(getattr(packet, overload) if overload else packet, who)
    hint = (
        " (a plain function: as a decorator, put @autofunc.functionalize(...) above "
        "@torch.library.custom_op(...), so that it gets the custom op)"
        if callable(op)
        else ""
    )
    raise AutofuncError(
        f"{who}: expected a CustomOpDef, OpOverload, OpOverloadPacket or 'ns::name', "
        f"got {type(op).__name__}{hint}"
    )


def _closest(name: str) -> str:
    """``"; did you mean 'ns::name'?"`` for the defined op whose ``ns::name`` is closest to
    ``name`` (its overload left out), or ``""`` when none is close."""
    wanted = name.partition(".")[0]
    known = {n.partition(".")[0] for n in torch._C._dispatch_get_all_op_names()}
    match = difflib.get_close_matches(wanted, sorted(known), n=1, cutoff=0.8)
    return f"; did you mean {match[0]!r}?" if match else ""

"""``register()``: route a mutable custom op's functionalization to an autofunc HOP.

Owns the table of registered op overloads and their strategies, and the rule installed with
``torch.library.register_torch_dispatch(op, FunctionalTensorMode, rule)``, the public hook that
``torch.compile``, ``torch.export`` and ``make_fx`` under functionalization all go through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.functional_tensor import FunctionalTensorMode, PythonFunctionalizeAPI

from . import guards
from .errors import AutofuncError, UnsupportedOpError
from .hops.common import may_overlap, normalize_args
from .hops.v1 import functionalize_v1, inexact_slot, mutable_slots
from .hops.v2 import eager_aliases, functionalize_v2
from .schema import OpInfo, op_info, qualname, resolve

__all__ = [
    "STRATEGIES",
    "Registration",
    "RegistrySnapshot",
    "RegistryState",
    "add_backend_hook",
    "functionalize",
    "override",
    "register",
    "registered_strategy",
    "registrations",
    "state_token",
]

log = logging.getLogger("autofunc.registry")

STRATEGIES = ("v1", "v2")


@dataclasses.dataclass(frozen=True)
class RegistrySnapshot:
    """What :meth:`RegistryState.snapshot` saw of some ops; an immutable value.

    ``names`` are the ops it covers. For each of them, ``strategies`` and ``owners`` hold its
    entry if it had one (an op missing from ``strategies`` was not routed to autofunc), and
    ``kernels`` whether it had a Functionalize kernel.
    """

    names: frozenset[str]
    strategies: tuple[tuple[str, str], ...]
    owners: tuple[tuple[str, int], ...]
    kernels: frozenset[str]


class RegistryState:
    """The registry's state, in one place; ``_state`` below is the process's one instance.

    Registration state, which :meth:`snapshot` saves and :meth:`restore` puts back:

    * the strategy of each routed op (qualname -> ``"v1"``/``"v2"``). The dispatch rule reads it
      on every call, so re-registering an op only changes this entry;
    * the owner of each registered op: the generation of the :func:`register` call whose
      handle's ``remove()`` undoes it;
    * the ``Library`` holding each op's Functionalize-key kernel (C++ functionalization, as in
      ``make_fx(torch.func.functionalize(f))``), destroyed when the op is removed;
    * :attr:`token`, the strategies as a hashable value.

    Process plumbing, which neither of them touches:

    * the ops whose dispatch rule is installed. A rule stays installed for the life of the
      process (PyTorch cannot unregister a rule of a ``custom_op``); once an op has no strategy
      its rule hands every call back to FunctionalTensorMode's own handling;
    * the generation counter: never rewound, so a handle replaced once never owns an op again.

    Invariants (:meth:`check`): ``token == tuple(sorted(strategies.items()))``, recomputed on
    every change (compiled frames are guarded on it, Note [Guarding on the registrations] in
    guards.py); every strategy is one of :data:`STRATEGIES`; every op with a strategy or a
    kernel has its rule installed; outside ``override`` blocks, the ops with a strategy are
    exactly the ops with an owner. Only the methods change the state.
    """

    def __init__(self) -> None:
        self._strategies: dict[str, str] = {}
        self._owners: dict[str, int] = {}
        self._kernel_libs: dict[str, torch.library.Library] = {}
        self._token: tuple = ()
        self._rules: set[str] = set()
        self._generations = itertools.count(1)

    # -- reading ---------------------------------------------------------------------------

    @property
    def token(self) -> tuple:
        """The strategies as a hashable value: equal tokens mean equal registrations."""
        return self._token

    def strategy(self, name: str) -> str | None:
        return self._strategies.get(name)

    def strategies(self) -> dict[str, str]:
        return dict(self._strategies)

    def has_kernel(self, name: str) -> bool:
        return name in self._kernel_libs

    # -- changing --------------------------------------------------------------------------

    def set_strategy(self, name: str, strategy: str | None) -> None:
        """Route ``name`` to ``strategy`` (``None``: to PyTorch's own handling)."""
        if strategy is None:
            self._strategies.pop(name, None)
        else:
            self._strategies[name] = strategy
        self._token = tuple(sorted(self._strategies.items()))

    def new_generation(self) -> int:
        return next(self._generations)

    def claim(self, name: str, strategy: str, generation: int) -> None:
        """Register ``name`` with ``strategy`` on behalf of the handle of ``generation``."""
        self.set_strategy(name, strategy)
        self._owners[name] = generation

    def release(self, name: str, generation: int) -> bool:
        """Undo ``name``'s registration if the handle of ``generation`` still owns it (a later
        :func:`register` call may have taken it over). Returns whether it did."""
        if self._owners.get(name) != generation:
            return False
        del self._owners[name]
        self.set_strategy(name, None)
        self.use_kernel(name, False)
        return True

    def install_rule(self, op: OpOverload) -> bool:
        """Install autofunc's dispatch rule for ``op`` unless it has it; returns whether it was
        installed just now."""
        name = qualname(op)
        if name in self._rules:
            return False
        _install_rule(op)
        self._rules.add(name)
        return True

    def use_kernel(self, name: str, wanted: bool, op: OpOverload | None = None) -> None:
        """Install (``wanted``) or destroy ``name``'s Functionalize kernel, where it has not
        (has) one already."""
        if not wanted:
            lib = self._kernel_libs.pop(name, None)
            if lib is not None:
                lib._destroy()
        elif name not in self._kernel_libs:
            self._kernel_libs[name] = _install_functionalize_kernel(op or resolve(name))

    # -- saving and restoring --------------------------------------------------------------

    def snapshot(self, names: Iterable[str] | None = None) -> RegistrySnapshot:
        """The registration state of ``names`` (default: every op with a strategy)."""
        names = frozenset(self._strategies if names is None else names)
        return RegistrySnapshot(
            names=names,
            strategies=tuple(sorted((n, s) for n, s in self._strategies.items() if n in names)),
            owners=tuple(sorted((n, g) for n, g in self._owners.items() if n in names)),
            kernels=frozenset(n for n in self._kernel_libs if n in names),
        )

    def restore(self, snapshot: RegistrySnapshot) -> None:
        """Put the ops ``snapshot`` covers back as they were then (strategy, owner, kernel);
        other ops are left as they are. Handles taken before the snapshot work again."""
        strategies, owners = dict(snapshot.strategies), dict(snapshot.owners)
        for name in sorted(snapshot.names):
            self.set_strategy(name, strategies.get(name))
            if name in owners:
                self._owners[name] = owners[name]
            else:
                self._owners.pop(name, None)
            self.use_kernel(name, name in snapshot.kernels)

    def check(self, *, outside_override: bool = True) -> None:
        """Raise ``AssertionError`` where an invariant of the class docstring does not hold
        (the strategy/owner one only if ``outside_override``)."""
        expected = tuple(sorted(self._strategies.items()))
        if self._token != expected:
            raise AssertionError(f"registry token: expected {expected}, got {self._token}")
        bad = {n: s for n, s in self._strategies.items() if s not in STRATEGIES}
        if bad:
            raise AssertionError(f"registry strategies: expected one of {STRATEGIES}, got {bad}")
        unrouted = (self._strategies.keys() | self._kernel_libs.keys()) - self._rules
        if unrouted:
            raise AssertionError(f"registry: ops without their dispatch rule: {sorted(unrouted)}")
        if outside_override and self._strategies.keys() != self._owners.keys():
            raise AssertionError(
                f"registry: expected the same ops with a strategy and an owner, got strategies "
                f"{sorted(self._strategies)} and owners {sorted(self._owners)}"
            )


_state = RegistryState()


def state_token() -> tuple:
    """The registrations as a hashable value: equal values mean equal registrations."""
    return _state.token


@dataclasses.dataclass
class Registration:
    """Returned by :func:`register`; ``remove()`` undoes exactly that registration."""

    ops: tuple[str, ...]
    strategy: str
    _generation: int

    def remove(self) -> None:
        for name in self.ops:
            _state.release(name, self._generation)
        _release_if_unused()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def registrations() -> dict[str, str]:
    """``{op qualname: strategy}`` of every op autofunc currently functionalizes."""
    return _state.strategies()


def registered_strategy(op: OpOverload | str) -> str | None:
    """The strategy ``op`` is registered with, or ``None``."""
    return _state.strategy(op if isinstance(op, str) else qualname(op))


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
            (Note [The Functionalize kernel and Inductor]).

    Returns:
        A :class:`Registration`; its ``remove()`` restores PyTorch's default handling. Registering
        an op again replaces its strategy.

    Raises:
        AutofuncError: unknown strategy or op name.
        UnsupportedOpError: the schema of one of the overloads is not supported (raised before
            anything is registered, naming the op and the argument).
    """
    infos = _infos(op, "autofunc.register", strategy)
    gen = _state.new_generation()
    first_time = False
    for info in infos:
        first_time |= _route(info, cpp_functionalize)
        _state.claim(info.qualname, strategy, gen)
        log.debug("registered %s with strategy %s", info.qualname, strategy)
    if first_time:
        # Frames compiled before this op was ever registered ran no autofunc code, so they carry
        # no guard on the registrations (Note [Guarding on the registrations]): recompile them.
        guards.drop_compiled_code()
    _install_pass()
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
        else [op_info(resolve(name)) for name in _state.strategies()]
    )
    saved = _state.snapshot(i.qualname for i in infos)
    try:
        for info in infos:
            if strategy is not None:
                # An op keeps the Functionalize kernel it has (registered on request).
                _route(info, True if _state.has_kernel(info.qualname) else None)
            _state.set_strategy(info.qualname, strategy)
        if strategy is not None:
            _install_pass()
        yield
    finally:
        _state.restore(saved)


def _infos(op: Any, who: str, strategy: str) -> list[OpInfo]:
    if strategy not in STRATEGIES:
        raise AutofuncError(f"{who}: strategy must be one of {STRATEGIES}, got {strategy!r}")
    ops = op if isinstance(op, (list, tuple)) else [op]
    # Validate every overload before touching anything.
    overloads = [o for one in ops for o in _overloads(one)]
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


def _route(info: OpInfo, cpp_functionalize: bool | None = None) -> bool:
    """Install autofunc's dispatch rule and, where wanted, its Functionalize kernel for
    ``info.op`` (idempotent). Returns whether the rule was installed just now, for the first
    time."""
    first = _state.install_rule(info.op)
    _state.use_kernel(info.qualname, _wants_functionalize_kernel(info, cpp_functionalize), info.op)
    return first


# Note [The Functionalize kernel and Inductor]
# C++ functionalization (``torch.func.functionalize``) reaches an op only through a kernel for
# the ``Functionalize`` dispatch key; PyTorch's built-in installs none (it refuses mutable
# custom ops there). But Inductor reads that kernel's presence as "this op may not be
# auto-functionalizable" and then treats every output of the op as an alias of its mutable
# inputs: the output's buffer is never reused in place and the mutated buffer lives as long as
# the output. For an op that returns nothing this costs nothing, so it gets the kernel; an op
# that returns tensors gets it only with ``cpp_functionalize=True``.
def _wants_functionalize_kernel(info: OpInfo, cpp_functionalize: bool | None) -> bool:
    return info.num_returns == 0 if cpp_functionalize is None else cpp_functionalize


# Note [Backend hooks]
# Backends that need something installed before a program with autofunc's HOPs reaches them
# (Inductor: the re-inplace pass) add a hook here; it runs on every register/override and on
# every functionalized call (so in whatever thread compiles). The registry imports no backend.
_backend_hooks: list[Callable[[], None]] = []


def add_backend_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` whenever an op is routed to autofunc or one of its calls is
    functionalized (idempotent per hook; ``hook`` must be cheap and idempotent itself)."""
    if hook not in _backend_hooks:
        _backend_hooks.append(hook)


def _install_pass() -> None:
    for hook in _backend_hooks:
        hook()


# Backends whose setup should go once no op is registered any more (Inductor: the pass leaves
# ``post_grad_custom_post_pass`` as the user had it). Each hook decides for itself whether
# something else still needs it (the Triton switch).
_release_hooks: list[Callable[[], None]] = []


def add_release_hook(hook: Callable[[], None]) -> None:
    """Run ``hook()`` whenever the last registration is removed (idempotent per hook)."""
    if hook not in _release_hooks:
        _release_hooks.append(hook)


def _release_if_unused() -> None:
    if not _state.strategies():
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
        handle = register(o, strategy=strategy, cpp_functionalize=cpp_functionalize)
        try:
            o.autofunc_registration = handle
        except AttributeError:
            pass
        return o

    return wrap if op is None else wrap(op)


def _install_rule(op: OpOverload) -> None:
    try:
        torch.library.register_torch_dispatch(op, FunctionalTensorMode, _functional_rule)
    except RuntimeError as e:
        raise AutofuncError(
            f"autofunc.register: {qualname(op)} already has a FunctionalTensorMode rule that is "
            f"not autofunc's ({e})"
        ) from e


def _install_functionalize_kernel(op: OpOverload) -> torch.library.Library:
    ns, name = op._schema.name.split("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    overload = "" if op._overloadname == "default" else f".{op._overloadname}"

    def kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            return _functionalize_call(_cpp_functionalize_api(), op, args, kwargs)
        except RuntimeError as e:
            if "tls_on_entry" not in str(e):
                raise
            # torch 2.11: tracing a HOP from a Functionalize kernel trips an internal assert
            # of PyTorch's Python dispatch fallback (PythonFallbackKernel.cpp). PyTorch's own
            # handling refuses such ops under C++ functionalization on every version.
            raise AutofuncError(
                f"{qualname(op)}: C++ functionalization (torch.func.functionalize) of an "
                f"autofunc-registered op fails inside torch {torch.__version__} (an internal "
                f"assert of its Python dispatch fallback); torch.compile and torch.export work, "
                f"and torch >= 2.13 supports torch.func.functionalize"
            ) from e

    lib.impl(f"{name}{overload}", kernel, "Functionalize")
    return lib


def _cpp_functionalize_api() -> Any:
    """The functionalization API for a call that reached the op's Functionalize kernel."""
    from torch._C._functorch import TransformType
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
    from torch._subclasses.functional_tensor import CppFunctionalizeAPI, FunctorchFunctionalizeAPI

    interpreter = retrieve_current_functorch_interpreter()
    if interpreter is None or interpreter.key() != TransformType.Functionalize:
        return CppFunctionalizeAPI()

    class _API(FunctorchFunctionalizeAPI):
        @contextlib.contextmanager
        def redispatch_to_next(self):
            # Leave the functorch level *and* the Functionalize key, so the HOP is traced as one
            # node instead of being functionalized again by its own rule.
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
            with self.interpreter.lower(), torch._C._ExcludeDispatchKeyGuard(keys):
                yield

    return _API(interpreter)


def _functional_rule(mode: FunctionalTensorMode, func: OpOverload, types, args, kwargs) -> Any:
    # Whatever this call becomes, the frame being compiled depends on the registrations.
    guards.guard_current_compile(state_token)
    if _state.strategy(qualname(func)) is None:  # unregistered: PyTorch's default handling
        return mode.__torch_dispatch__(func, types, args, kwargs)
    return _functionalize_call(PythonFunctionalizeAPI(mode=mode), func, args, kwargs)


def _functionalize_call(ctx: Any, func: OpOverload, args: tuple, kwargs: dict | None) -> Any:
    strategy = _state.strategy(qualname(func)) or "v2"
    if strategy == "v1":
        why = _v1_needs_v2(ctx, func, args, kwargs or {})
        if why is not None:
            log.debug("%s: %s; this call uses v2", func, why)
            strategy = "v2"
    _install_pass()  # Note [Backend hooks]: this thread may lack the Inductor pass
    if strategy == "v1":
        return functionalize_v1(ctx, func, args, kwargs or {})
    return functionalize_v2(ctx, func, args, kwargs or {})


def _v1_needs_v2(ctx: Any, func: OpOverload, args: tuple, kwargs: dict) -> str | None:
    """Why a call of a v1-registered op must be functionalized with v2, or ``None``."""
    info = op_info(func)
    kw = normalize_args(func, args, kwargs)
    tensors = [t for _, _, t in mutable_slots(info, kw)]
    if any(may_overlap(ctx, a, b) for a, b in itertools.combinations(tensors, 2)):
        # Note [v1 and aliased args]
        # v1 clones each mutable argument separately. When two of them may share memory (the
        # same tensor twice, or overlapping views of one base) separate clones would break the
        # aliasing the op sees in eager, so that call is functionalized with v2, which clones
        # their common base once.
        return "mutable arguments may overlap"
    arg = inexact_slot(info, kw)
    if arg is not None:  # Note [Writing back unfold views] in hops/common.py
        return f"argument {arg} is an unfold view"
    aliases = eager_aliases(info, kw)
    if aliases:
        # Note [Read arguments eager aliases] in hops/v2.py: v1 would hand the op a copy of
        # the mutable argument and the old tensor as the read one, a call eager never made
        # (an op that reads what it wrote gives another result); v2 passes one tensor for both.
        read, mutable = aliases[0]
        return f"read argument {read} is the tensor passed as {mutable}"
    return None


def _overloads(op: Any) -> Iterable[OpOverload]:
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
                f"autofunc.register: no op named {op!r} (expected 'ns::name[.overload]')"
            )
        if overload and overload not in packet.overloads() and overload != "default":
            raise AutofuncError(
                f"autofunc.register: op {ns}::{name} has no overload {overload!r} "
                f"(it has {', '.join(packet.overloads())})"
            )
        return _overloads(getattr(packet, overload) if overload else packet)
    hint = (
        " (a plain function: as a decorator, put @autofunc.functionalize(...) above "
        "@torch.library.custom_op(...), so that it gets the custom op)"
        if callable(op)
        else ""
    )
    raise AutofuncError(
        f"autofunc.register: expected a CustomOpDef, OpOverload, OpOverloadPacket or 'ns::name', "
        f"got {type(op).__name__}{hint}"
    )

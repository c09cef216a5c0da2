"""The registry's state in one object: :class:`RegistryState` and its :class:`RegistrySnapshot`.

Owns the registrations (each routed op's strategy, the :func:`register` call that owns it, its
Functionalize kernel) and their ``snapshot()``/``restore()``. It installs nothing by itself: the
dispatch rule and the kernel come from the installers it is built with (``routing.py`` builds
the process's one instance). Imports torch and ``schema`` only, never ``routing`` or ``api``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable

import torch
from torch._ops import OpOverload

from ..schema import qualname, resolve

__all__ = ["STRATEGIES", "RegistrySnapshot", "RegistryState"]

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
    """The registry's state, in one place; ``routing.registry_state`` is the process's one instance.

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
    * the generation counter: never rewound, so a handle replaced once never owns an op again;
    * the installers it is built with: ``install_rule(op)`` installs the dispatch rule and
      ``install_kernel(op)`` returns the ``Library`` holding a new Functionalize kernel.

    Invariants (:meth:`check`): ``token == tuple(sorted(strategies.items()))``, recomputed on
    every change (compiled frames are guarded on it, Note [Guarding on the registrations] in
    guards.py); every strategy is one of :data:`STRATEGIES`; every op with a strategy or a
    kernel has its rule installed; outside ``override`` blocks, the ops with a strategy are
    exactly the ops with an owner. Only the methods change the state.
    """

    def __init__(
        self,
        install_rule: Callable[[OpOverload], None],
        install_kernel: Callable[[OpOverload], torch.library.Library],
    ) -> None:
        self._install_rule = install_rule
        self._install_kernel = install_kernel
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
        self._install_rule(op)
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
            self._kernel_libs[name] = self._install_kernel(op or resolve(name))

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

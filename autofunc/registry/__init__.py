"""The registry: which mutable custom ops autofunc functionalizes, and with which HOP.

Its modules, each importing only those above it (and no backend, Note [Backend hooks]):

    state.py    RegistryState: the registrations in one object, snapshot()/restore()
    routing.py  the process's state and what reads it on every call: the FunctionalTensorMode
                dispatch rule, the Functionalize kernel, v1 or v2 per call, the backend hooks
    api.py      register(), functionalize(), override(), Registration handles, release hooks
    switches.py what the pass decides besides the registered ops (the opt-in adapters), the
                re-inplace switch, and the key a compiled graph's cache entry carries for them
                (imported on first use, not by this module)

This module only re-exports the public names.
"""

from .api import (
    Registration,
    add_release_hook,
    functionalize,
    override,
    register,
    registered_strategy,
    registrations,
)
from .routing import add_backend_hook, state_token
from .state import STRATEGIES, RegistrySnapshot, RegistryState

__all__ = [
    "STRATEGIES",
    "Registration",
    "RegistrySnapshot",
    "RegistryState",
    "add_backend_hook",
    "add_release_hook",
    "functionalize",
    "override",
    "register",
    "registered_strategy",
    "registrations",
    "state_token",
]

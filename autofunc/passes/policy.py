"""What the re-inplace pass must respect about the backend that lowers the graph it rewrites.

A :class:`Policy` is a value: each field names one behaviour of the backend that a rule
(``rules.py``), the rewrite (``reinplace.py``) or the emitted nodes (``emit.py``) depend on,
and the Note that explains it. :data:`GENERIC` assumes a backend that runs the graph as it
stands (eager ATen, ``aot_eager``, ``torch.export``); Inductor's policy is ``INDUCTOR`` in
``inductor_repairs.py``, where the Inductor knowledge lives, and the Inductor glue passes it
in. A new backend builds its own ``Policy`` beside its repairs and passes it to ``reinplace``.
Imports nothing of the pass, so every phase may import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

__all__ = ["GENERIC", "Policy"]


@dataclasses.dataclass(frozen=True)
class Policy:
    """The backend behaviours the pass respects; the defaults are :data:`GENERIC`'s."""

    # The name reports and warnings show.
    name: str = "generic"
    # Which nodes the backend may evaluate later than their place in the graph, where a write
    # made after them is visible to them: a read before a call of a value still needed after it
    # objects (rule "lazy read under Inductor", Note [Lazy reads under Inductor]; or is
    # computed before the call, Note [Lazy reads computed before the call]). ``None``: every
    # node runs where it stands, that rule never objects.
    lazy_reader: Callable[[fx.Node], bool] | None = None
    # Whether the backend lays out the buffers it computes as it likes, whatever strides the
    # graph records: a non-contiguous computed buffer taken other than whole is cloned into a
    # span whose layout is fixed (rule "layout Inductor chooses", Note [Layouts Inductor
    # chooses]).
    chooses_layouts: bool = False
    # Whether every scatter that writes a buffer (a view of a graph input) back into its input
    # must fold once the buffer is written in place, else the buffer keeps its clone (rule
    # "graph input: copied back, not returned", Note [Views of graph inputs]: Inductor cannot
    # lower a scatter of a dtype view of an input's view).
    scatters_must_fold: bool = False
    # Whether a buffer that several aliasing arguments of one call share gets a fixed layout
    # (an ``as_strided`` alias when written in place, ``pin_layout``; a span copy when cloned):
    # the backend would otherwise copy an argument whose layout is not fixed once per argument
    # and break their aliasing (Note [Clones for Inductor]).
    fix_aliased_layouts: bool = False
    # Whether a computed buffer written in place through views is pinned whole (``as_strided``
    # of the buffer), so the backend computes it once rather than each view apart (Note [Views
    # of unrealized buffers under Inductor] in reinplace.py).
    pin_views_of_unrealized: bool = False
    # The op giving the second and later identical arguments of a call a tensor object of
    # their own (Note [A fresh alias Inductor keeps] in inductor_ops.py): ``aten.alias`` where the
    # backend keeps it, an opaque op where it would fold the alias into its input.
    alias_op: Any = torch.ops.aten.alias.default
    # The op declaring, just before and just after a call whose writes the backend cannot see
    # (``Mutation.declared_writes``: an ``invoke_subgraph``), the buffers it writes
    # (Note [Writes Inductor cannot see] in inductor_ops.py); ``None``: the backend runs the
    # graph in its order, nothing to declare.
    hidden_writes_op: Any = None
    # Graph repairs run before the facts are gathered, in order, each given the graph.
    before: tuple[Callable[[fx.Graph], Any], ...] = ()
    # Graph repairs run after the rewrite, in order, each given the pass's context (``Pass``:
    # the graph module, the analysis and the facts).
    after: tuple[Callable[[Any], Any], ...] = ()
    # Whether the pass lints the graph when done (a backend that lints after its own passes,
    # as Inductor does, says no).
    lint: bool = True

    def __str__(self) -> str:
        return self.name


# The backend runs the graph as it stands: no lazy reads, layouts as recorded, no repairs.
GENERIC = Policy()

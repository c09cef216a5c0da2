"""Differential random-program testing of autofunc: eager vs. compiled (test tooling; not part
of the installed package).

* ``ops``: the ``autofunc_fuzz`` ops (:data:`OPS`), with one, two or three mutable tensors, a
  list, an optional, a fresh-tensor return. Every op reads its non-mutable arguments *before*
  writing anything (so a read argument that aliases a mutable one has the same meaning in eager
  and in a functional program), except ``mlate``, which the generator only calls with a read
  argument disjoint from its mutable one.
* ``program``: a program as source text (``def prog(a, b): ...``) plus an input factory.
* ``generate``: :func:`generate` builds one, simulating every statement on real tensors as it
  goes, so shapes, view validity and memory overlap are exact and it runs in eager.
* ``check``: :func:`check` compiles a program on one path (``aot_eager``, ``capture`` =
  AOTAutograd with the re-inplace pass, ``inductor``) with the ops registered with one strategy
  and compares outputs and the final values of the inputs with eager.
* ``shrink``: :func:`shrink` / :func:`shrink_failure` greedily delete statements while the
  failure persists; :func:`triage` runs a failure on every strategy and path.
* ``repro``: :func:`write_repro` saves a pytest-style script that runs against the checkout.

``python -m tools.fuzz_sweep`` and ``python -m tools.fuzz_campaign`` run long sweeps;
``tests/test_fuzz.py`` runs a bounded one in CI.
"""

from .check import LIMITATIONS, Failure, check, register_strategy
from .generate import Features, generate, program_for
from .ops import OP_NAMES, OPS, PATHS, REGIONS, STRATEGIES, m1, m2, m3, m3way, mlate, mopt, mret
from .program import EagerError, FuzzProgram, Stmt
from .repro import repro_source, write_repro
from .shrink import _without, shrink, shrink_failure, triage

__all__ = [
    "LIMITATIONS",
    "OPS",
    "REGIONS",
    "OP_NAMES",
    "PATHS",
    "STRATEGIES",
    "EagerError",
    "Failure",
    "Features",
    "FuzzProgram",
    "Stmt",
    "check",
    "generate",
    "m1",
    "m2",
    "m3",
    "m3way",
    "mlate",
    "mopt",
    "mret",
    "program_for",
    "register_strategy",
    "repro_source",
    "shrink",
    "shrink_failure",
    "triage",
    "write_repro",
]

"""Differential random-program testing of autofunc: eager vs. compiled (test tooling; not part
of the installed package).

* ``ops``: the ``autofunc_fuzz`` ops (:data:`OPS`), with one, two or three mutable tensors, a
  list, an optional, a fresh-tensor return, list and optional read arguments, an
  ``index_put_`` into a cache. Most ops read their non-mutable arguments *before* writing
  anything; ``mlate``, ``mlate2`` and ``mlret`` read after they write, so a read argument over
  the written memory sees the new values in eager (``Features.late_reads`` gives them such
  arguments; without it ``mlate`` only gets disjoint ones and the others are not drawn).
* ``program``: a program as source text (``def prog(a, b): ...``) plus an input factory.
* ``generate``: :func:`generate` builds one, simulating every statement on real tensors as it
  goes, so shapes, view validity and memory overlap are exact and it runs in eager.
* ``check``: :func:`check` compiles a program on one path (``aot_eager``, ``capture`` =
  AOTAutograd with the re-inplace pass, ``inductor``) with the ops registered with one strategy
  and compares outputs and the final values of the inputs with eager; it can also measure the
  bytes the compiled call allocates (``tools.compare``'s measurement).
* ``builtin``: :func:`against_builtin` runs a program under PyTorch's built-in v2 as well and
  sorts each result (:data:`OUTCOMES`): wrong where the built-in is right, wrong where it is
  wrong too, right where it is wrong, or, autofunc v2 allocating more bytes than a right
  built-in, a ``kind="bytes"`` failure.
* ``shrink``: :func:`shrink` / :func:`shrink_failure` greedily delete statements while the
  failure persists (a ``bytes`` one: while autofunc still allocates more); :func:`triage` runs
  a failure on every strategy and path.
* ``repro``: :func:`write_repro` saves a pytest-style script that runs against the checkout
  (for a ``bytes`` failure it also measures both configurations and compares their bytes).

``python -m tools.fuzz_sweep`` and ``python -m tools.fuzz_campaign`` run long sweeps;
``tests/test_fuzz.py`` runs a bounded one in CI.
"""

from .builtin import BUILTIN, OUTCOMES, Verdict, against_builtin, bytes_failure, check_bytes
from .check import LIMITATIONS, Failure, check, register_strategy
from .generate import Features, generate, program_for
from .ops import (
    OP_NAMES,
    OPS,
    PATHS,
    REGIONS,
    STRATEGIES,
    m1,
    m2,
    m3,
    m3way,
    mcache,
    mlate,
    mlate2,
    mlist,
    mlret,
    mopt,
    moptr,
    mret,
)
from .program import EagerError, FuzzProgram, Stmt
from .repro import repro_source, write_repro
from .shrink import _without, shrink, shrink_failure, triage

__all__ = [
    "BUILTIN",
    "LIMITATIONS",
    "OUTCOMES",
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
    "Verdict",
    "against_builtin",
    "bytes_failure",
    "check_bytes",
    "check",
    "generate",
    "m1",
    "m2",
    "m3",
    "m3way",
    "mcache",
    "mlate",
    "mlate2",
    "mlist",
    "mlret",
    "mopt",
    "moptr",
    "mret",
    "program_for",
    "register_strategy",
    "repro_source",
    "shrink",
    "shrink_failure",
    "triage",
    "write_repro",
]

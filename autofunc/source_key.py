"""The digest of autofunc's own code that a cache key of a compiled graph must cover (Note [The
cache key covers the graph's code]): backend-neutral; Inductor's pass puts it in its ``uuid``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["NOT_IN_GRAPH", "graph_sources", "source_digest"]


# Note [The cache key covers the graph's code]
# On a hit in Inductor's FX graph cache or AOTAutograd's cache neither functionalization nor the
# pass runs, so their key (``ReinplacePass.uuid``) must change with every piece of autofunc code
# that decides what a compiled graph holds: the pass, the HOPs and their view chains, and the
# registry (which HOP a call becomes: a v1 call may become v2). A hand-kept list of those
# modules goes stale when one is added, moved or split into a package, so every source file of
# the package is hashed, at any depth, except those that only run around a compile. What the
# pass and the registry import is checked against this set by tests/test_inductor.py.
NOT_IN_GRAPH = frozenset(
    {
        "__main__.py",  # ``python -m autofunc``: the CLI
        "cli.py",  # the CLI: explain and the benchmarks from a shell
        "explain.py",  # its compile turns Inductor's and AOTAutograd's caches off
        "testing.py",  # test helpers: their capture backend is not Inductor and is not cached
        "bench",  # benchmarks: build, compile and time programs
        "kernels",  # autofunc.kernels: custom ops; a graph names them, their code runs in them
    }
)


def graph_sources() -> list[Path]:
    """The package's source files that the cache key hashes, in a fixed order."""
    root = Path(__file__).parent
    return sorted(
        path for path in root.rglob("*.py") if path.relative_to(root).parts[0] not in NOT_IN_GRAPH
    )


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over the path (relative to the package) and the bytes of each graph source."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in graph_sources():
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()

"""Inductor as a backend of the re-inplace pass.

* ``glue``: the pass as Inductor's post-grad pass (``ReinplacePass``, ``install_pass``), its
  cache key and the reports of graphs loaded from Inductor's cache.
* ``policy``: ``InductorPolicy`` / ``INDUCTOR``, what Inductor does that the pass respects.
* ``repairs`` (with ``share_views``): the rewrites that keep Inductor's lowering right.
* ``ops``: the ``fresh_alias`` and ``written`` ops the pass leaves for Inductor.
* ``lazy_reads``: values Inductor computes late, computed or moved before a call instead.
* ``reads_apart``: what a copy into a written input reads of it elsewhere, computed first.
* ``taken_views``: a value a later call takes whole, pinned where a call takes a view of it.

Importing this package imports nothing of Inductor; ``glue`` and ``policy`` do.
"""

__all__: list[str] = []

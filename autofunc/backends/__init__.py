"""The backends the re-inplace pass runs for, one folder each.

A backend's folder holds everything that knows the backend: its glue (how the pass is run
inside the backend's compile, its caches), its ``Policy`` (what the backend does that the
pass's rules and rewrite must respect), its repairs and its own ops. The backend-neutral pass
(``autofunc.passes``) imports nothing from here; a backend imports the pass.
"""

__all__: list[str] = []

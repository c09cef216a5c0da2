"""autofunc's HOPs: ``autofunc_v1`` and ``autofunc_v2``, and the adapters through which the
re-inplace pass reads them (``hops.adapter``). Importing the package registers both."""

from . import v1, v2  # noqa: F401

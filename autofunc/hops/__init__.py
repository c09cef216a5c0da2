"""autofunc's HOPs: ``autofunc_v1`` and ``autofunc_v2``, and the adapters through which the
re-inplace pass reads functional mutation nodes (``hops.adapter``): both HOPs, PyTorch's
``auto_functionalized_v2`` around a region (``hops.subgraph``) and, when switched on, user
Triton kernels (``hops.triton``). Importing the package registers the first three."""

from . import subgraph, v1, v2  # noqa: F401

__all__: list[str] = []  # imported for the registrations; the modules are the API

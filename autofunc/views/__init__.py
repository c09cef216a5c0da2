"""View chains: regenerate a view of a base tensor with standard view ops.

The package owns the ``ViewChain`` data model, the inference of the cheapest chain that
reproduces a view geometry exactly from its base geometry (across dtypes too, in bytes) and
the HOP-kwargs wire format. It is pure arithmetic on sizes, strides and offsets (ints or
``torch.SymInt``): it must not import HOP, FX-graph or Inductor modules, and it never installs
guards (only ``statically_known_true`` decisions). Its modules, each importing only those above:

    geometry.py   guard-free arithmetic on (size, stride, offset); dtype rescaling; the
                  strides of a view (Note [View steps]) and coalescing
    steps.py      the steps (Select, Slice, AsStrided, DtypeView, View), each carrying its
                  apply, geometry, emit, box, encode/decode and text; STEPS, the one
                  tag -> class table
    chain.py      ViewChain: steps applied to a tensor or a geometry, and rendered
    search.py     dim matchings and the offset decomposition behind inference
    inference.py  infer_view, infer_view_of, infer_dtype_view
    wire.py       encode_chain, read_chain, decode_chain (Note [A flat wire format])

This module only re-exports the public names.
"""

from .chain import ViewChain
from .geometry import Geom, IntLike, coalesced, dtype_view_geometry, split_at
from .inference import infer_dtype_view, infer_view, infer_view_of
from .steps import AsStrided, DtypeView, Select, Slice, Step, View
from .wire import decode_chain, encode_chain, read_chain

__all__ = [
    "AsStrided",
    "DtypeView",
    "Geom",
    "IntLike",
    "Select",
    "Slice",
    "Step",
    "View",
    "ViewChain",
    "coalesced",
    "decode_chain",
    "dtype_view_geometry",
    "encode_chain",
    "infer_dtype_view",
    "infer_view",
    "infer_view_of",
    "read_chain",
    "split_at",
]

"""Triton KV-cache kernels (installed as ``autofunc.kernels``).

vLLM-style kernels used as the test bed for functionalizing mutable custom ops. Each module holds
one kernel: a PyTorch ``_ref``, the ``@triton.jit`` kernel, its launcher and an
``autofunc_kernels::<name>`` custom op (Triton on CUDA, the reference elsewhere). Importing this
package does not require Triton (see ``_triton.py``) and must not import the rest of autofunc.
"""

from ._triton import HAS_TRITON
from .paged_attention import (
    paged_decode_attention,
    paged_decode_attention_op,
    paged_decode_attention_ref,
)
from .reshape_and_cache import reshape_and_cache, reshape_and_cache_op, reshape_and_cache_ref
from .rms_norm import fused_add_rms_norm, fused_add_rms_norm_op, fused_add_rms_norm_ref
from .rotary import rotary_embedding, rotary_embedding_op, rotary_embedding_ref

__all__ = [
    "HAS_TRITON",
    "fused_add_rms_norm",
    "fused_add_rms_norm_op",
    "fused_add_rms_norm_ref",
    "paged_decode_attention",
    "paged_decode_attention_op",
    "paged_decode_attention_ref",
    "reshape_and_cache",
    "reshape_and_cache_op",
    "reshape_and_cache_ref",
    "rotary_embedding",
    "rotary_embedding_op",
    "rotary_embedding_ref",
]

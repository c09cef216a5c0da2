"""autofunc inside other stacks: each module sets autofunc up where that stack compiles
(``vllm.py``: a vLLM plugin). Imported only by the stack's own entry points, never by
``import autofunc``."""

__all__: list[str] = []

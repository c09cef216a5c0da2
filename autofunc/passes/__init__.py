"""The re-inplace pass (``reinplace.py``, Note [Pipeline]) and its steps, one module each:
import the module you need; the package itself defines nothing."""

__all__: list[str] = []

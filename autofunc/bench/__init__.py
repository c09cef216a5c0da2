"""The user-facing benchmarks (``autofunc bench``, ``bench-compile``, ``bench-kernels``,
``bench-triton``): import the module you need; the package itself defines nothing."""

__all__: list[str] = []

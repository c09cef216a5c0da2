"""The conformance suite: upstream mutable-custom-op programs (``programs``) run by ``harness``
under every strategy and backend. ``python -m tools.conformance`` runs the whole matrix;
``tests/conformance`` runs the CI subset."""

"""Developer tools for autofunc: not part of the installed package.

Run each from the repository root as ``python -m tools.<name>`` (``--help`` for its options):

* ``compare``: the program corpus under every configuration, with the bytes gate;
* ``conformance``: PyTorch's and vLLM's mutable-custom-op programs on every backend;
* ``fuzz_sweep`` / ``fuzz_campaign``: differential fuzzing, eager vs. compiled;
* ``gpu_campaign``: what a lent GPU measures, in two parts of 300 s (``scripts/gpu_campaign.sh``);
* ``guard_overhead``: the cost of autofunc's Dynamo guards per call;
* ``profile_pass``: the re-inplace pass alone on a deep decoder's graph.

Libraries the tools and ``tests/`` share: ``corpus`` (the ``autofunc_corpus`` ops and programs),
``fuzzing`` (the ``autofunc_fuzz`` ops and the fuzzer), ``conformance.harness`` and
``conformance.programs``. Those define custom ops when imported, which is why they live here
and not in ``autofunc``. Nothing in ``autofunc`` imports this package.
"""

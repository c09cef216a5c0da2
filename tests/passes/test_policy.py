"""The backend policy of the re-inplace pass (``autofunc.passes.policy``): the Inductor glue
passes ``INDUCTOR``, the two built-in policies decide one graph differently where Inductor
differs (the rule "lazy read under Inductor"), and the deprecated ``for_inductor`` still picks
them."""

import pytest
import torch
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule

import autofunc
from autofunc import Reason
from autofunc.passes.inductor_repairs import INDUCTOR
from autofunc.passes.policy import GENERIC, Policy
from autofunc.passes.report import Report
from autofunc.testing import compile_capture, same_result
from tools import corpus


def lazy_read(x, y):
    b = x * 1
    c = b + 1  # read before the call, needed after it: Inductor computes it late
    corpus.add_(b[0], y)
    return c.sum(1) + b[0].sum()


def _inputs():
    return torch.randn(6, 5), torch.randn(5)


def _functional_graph(fn):
    """The functional forward graph of ``fn`` and a function that gives a fresh copy of it."""
    compiled, captured = compile_capture(fn, reinplace_pass=False)
    compiled(*_inputs())
    (gm,) = captured.modules

    def fresh():
        graph = fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        return _LazyGraphModule(gm, graph)

    return gm, fresh


def test_the_inductor_glue_passes_the_inductor_policy(monkeypatch):
    from autofunc import inductor

    seen = []

    def spy(gm, **kwargs):
        seen.append(kwargs)
        return Report()

    monkeypatch.setattr(inductor, "reinplace", spy)
    gm = fx.symbolic_trace(lambda x: x + 1)
    inductor.ReinplacePass()(gm.graph, is_inference=True)
    (kwargs,) = seen
    assert kwargs["policy"] is INDUCTOR
    assert "for_inductor" not in kwargs


def test_the_policies_differ_where_inductor_does():
    assert isinstance(INDUCTOR, Policy)
    assert GENERIC == Policy()
    assert GENERIC.lazy_reader is None and INDUCTOR.lazy_reader is not None
    assert GENERIC.lint and not INDUCTOR.lint
    assert GENERIC.before == GENERIC.after == ()
    assert INDUCTOR.alias_op is torch.ops.autofunc.fresh_alias.default
    assert (str(GENERIC), str(INDUCTOR)) == ("generic", "inductor")


def test_a_lazy_read_objects_only_under_inductor(strategy):
    # "lazy read under Inductor": GENERIC runs ``b + 1`` where it stands, before the call, so
    # ``b`` is written in place; Inductor may compute it after the call (as big as the buffer:
    # it keeps the clone).
    original, fresh = _functional_graph(lazy_read)
    x, y = _inputs()
    for policy, reason in [(GENERIC, Reason.INPLACE), (INDUCTOR, Reason.LAZY_READ)]:
        gm = fresh()
        (d,) = autofunc.reinplace(gm, is_inference=True, policy=policy).decisions
        assert d.reason is reason, (policy, d.explain())
        assert same_result(gm(x.clone(), y), original(x.clone(), y))


def test_for_inductor_is_a_deprecated_alias_of_the_policy(strategy):
    _, fresh = _functional_graph(lazy_read)
    for flag, reason in [(False, Reason.INPLACE), (True, Reason.LAZY_READ)]:
        with pytest.warns(DeprecationWarning, match="policy="):
            report = autofunc.reinplace(fresh(), is_inference=True, for_inductor=flag)
        assert [d.reason for d in report.decisions] == [reason]
    with pytest.raises(TypeError, match="not both"):
        autofunc.reinplace(fresh(), policy=INDUCTOR, for_inductor=True)

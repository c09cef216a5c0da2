"""The pass's soundness rules one by one (``autofunc.passes.rules.RULES``): each rule's check
on a hand-made query, and ``decide``'s contract (the first objection wins; none: in place).
Whole programs that reach each rule are in test_reinplace.py and test_inductor_hazards.py."""

import re
import types

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from autofunc import Reason
from autofunc.passes import rules as R
from autofunc.passes.context import Buffer, Provided, Query
from autofunc.passes.policy import GENERIC
from autofunc.testing import compile_capture, same_result
from tools import corpus


def _query(buf_node, *, enable=True, version=None, root=None):
    analysis = types.SimpleNamespace(
        version={} if version is None else version,
        root={} if root is None else root,
    )
    ctx = types.SimpleNamespace(enable=enable, analysis=analysis, policy=GENERIC)
    buf = Buffer(buf_node, 0, ["x"], [])
    return Query(ctx, None, None, buf, [buf])


def _node(graph, op, name, val):
    """A node of kind ``op`` (placeholder, get_attr, call_function) with fake value ``val``."""
    target = torch.ops.aten.alias.default if op == "call_function" else name
    node = graph.create_node(op, target, name=name)
    node.meta["val"] = val
    return node


@pytest.fixture
def fake():
    with FakeTensorMode() as mode:
        yield mode


def test_rules_are_named_and_ordered():
    names = [r.name for r in R.RULES]
    assert len(set(names)) == len(names)
    # the "cannot analyse" rules first, the read rules last (they are the costly ones)
    assert names[:3] == ["disabled", "no fake value", "module constant"]
    assert names[-2:] == ["a read the backend evaluates late", "old value read later"]
    # named, not numbered: code and prose cite a rule by its name (the R-labels are the
    # reinplace() docstring table's only)
    assert not [n for n in names if re.match(r"R\d+\b", n)]


def test_disabled(fake):
    g = fx.Graph()
    q = _query(_node(g, "placeholder", "x", torch.empty(3)), enable=False)
    assert R._disabled(q) == (Reason.DISABLED, "")
    assert R._disabled(_query(q.buf.node)) is None


def test_no_value(fake):
    g = fx.Graph()
    x = _node(g, "placeholder", "x", torch.empty(3))
    assert R._no_value(_query(x)) == (Reason.NO_VALUE, "x")
    assert R._no_value(_query(x, version={x: 0})) is None


def test_constant(fake):
    g = fx.Graph()
    w = _node(g, "get_attr", "w", torch.empty(3))
    x = _node(g, "placeholder", "x", torch.empty(3))
    assert R._constant(_query(w, version={w: 0}, root={0: w})) == (Reason.CONSTANT, "w")
    assert R._constant(_query(x, version={x: 0}, root={0: x})) is None


def test_overlapping_buffer(fake):
    g = fx.Graph()
    expanded = _node(g, "call_function", "e", torch.empty(1, 4).expand(3, 4))
    dense = _node(g, "call_function", "d", torch.empty(3, 4))
    user_input = _node(g, "placeholder", "x", torch.empty(1, 4).expand(3, 4))
    assert R._overlapping_buffer(_query(expanded))[0] is Reason.OVERLAPS_ITSELF
    assert R._overlapping_buffer(_query(dense)) is None
    # a graph input that overlaps itself is the caller's tensor: not this rule's business
    assert R._overlapping_buffer(_query(user_input)) is None


def test_first_objection_wins(monkeypatch):
    seen = []

    def rule(name, verdict):
        def check(q):
            seen.append(name)
            return verdict

        return R.Rule(name, check)

    monkeypatch.setattr(
        R, "RULES", (rule("a", None), rule("b", (Reason.READ_LATER, "b")), rule("c", None))
    )
    assert R.decide(None) == (Reason.READ_LATER, "b", None)
    assert seen == ["a", "b"]  # later rules are not asked
    monkeypatch.setattr(R, "RULES", (rule("a", None),))
    assert R.decide(None) == (Reason.INPLACE, "", None)


def test_consent_on_a_condition(monkeypatch):
    """A rule that consents on a condition returns the action; the later rules see it
    (``q.provided``), the last one given is the ruling's, and an objection still wins."""
    first, second = Provided("realize first", ("r1",)), Provided("realize second")
    heard = []

    def rule(name, verdict):
        def check(q):
            heard.append((name, q.provided))
            return verdict

        return R.Rule(name, check)

    q = types.SimpleNamespace(provided=None)
    monkeypatch.setattr(R, "RULES", (rule("a", first), rule("b", None), rule("c", second)))
    assert R.decide(q) == (Reason.INPLACE, "", "realize second")
    assert heard == [("a", None), ("b", first), ("c", first)]
    q = types.SimpleNamespace(provided=None)
    monkeypatch.setattr(R, "RULES", (rule("a", first), rule("b", (Reason.READ_LATER, "x"))))
    assert R.decide(q) == (Reason.READ_LATER, "x", None)


def test_the_rule_table_is_rules():
    # the table in rules.py's docstring lists RULES in order, each with a reason that exists
    rows = re.findall(r"^R(\d+) +(\S.*?)  +``([A-Z_]+)``", R.__doc__, re.M)
    assert [int(n) for n, _, _ in rows] == list(range(1, len(R.RULES) + 1))
    names = [r.name for r in R.RULES]
    for (_, shown, _), name in zip(rows, names):
        assert name.startswith(shown.strip()), (shown, name)
    assert all(hasattr(Reason, reason) for _, _, reason in rows)


def _program(x, y):
    b = x * 2
    corpus.add_(b, y)
    return b + 1


def test_a_rule_added_in_its_test(monkeypatch, strategy):
    """A rule inserted into ``RULES`` here, changing nothing else: the pass asks it at its place
    and the report gives its reason and detail (recipe "A rule" in docs/architecture.md)."""
    asked = []

    def no_computed_buffers(q):  # a toy rule: keep the clone of every computed buffer
        asked.append(q.buf.node.name)
        return (Reason.READ_LATER, "toy rule") if q.buf.node.op != "placeholder" else None

    rules = list(R.RULES)
    rules.insert(len(rules) - 1, R.Rule("no computed buffers", no_computed_buffers))
    monkeypatch.setattr(R, "RULES", tuple(rules))
    x, y = torch.randn(4), torch.randn(4)
    compiled, captured = compile_capture(_program)
    assert same_result(compiled(x, y), _program(x, y))
    (d,) = [d for _, r in captured.reports for d in r.decisions]
    assert (d.reason, d.detail) == (Reason.READ_LATER, "toy rule")
    assert asked
    monkeypatch.undo()
    torch._dynamo.reset()
    compiled, captured = compile_capture(_program)
    compiled(x, y)
    assert [d.reason for _, r in captured.reports for d in r.decisions] == [Reason.INPLACE]

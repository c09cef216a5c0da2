"""Training programs: an input that requires grad next to a registered op mutating a buffer that
does not. Loss, gradients, the final buffer and, over a few SGD steps, the parameters must match
eager."""

from __future__ import annotations

import pytest
import torch

from autofunc import Reason
from autofunc.testing import compile_capture, same_result
from tools import corpus


def _whole_buffer(x, buf):
    h = x.sin()
    corpus.add_(buf, h.detach())
    return (h * buf).sum()


def _row_of_buffer(x, buf):
    h = x.sin()
    corpus.add_(buf[1], h[1].detach())
    return (h * buf).sum()


def _compile(fn, backend):
    if backend == "capture":
        return compile_capture(fn)[0]
    return torch.compile(fn, backend=backend, fullgraph=True)


@pytest.mark.parametrize("fn", [_whole_buffer, _row_of_buffer])
@pytest.mark.parametrize("backend", ["aot_eager", "capture", "inductor"])
def test_grad_with_mutated_buffer(fn, backend, strategy):
    # Writing the whole buffer in place makes the forward's saved output (the new buf) the
    # user's tensor, which AOTAutograd may donate to the backward: inside a compile the pass
    # takes it out of the donated buffers (Note [Saved values of written inputs]); where it
    # cannot, it keeps the clone (Reason.SAVED_OUTPUT). In the row case under v1, Inductor's own
    # re-inplacing of the select_scatter onto the input would do the same; the pass returns
    # that output as a copy (Note [Returned scatters under Inductor]).
    x = torch.randn(3, 4, requires_grad=True)
    buf = torch.randn(3, 4)
    x_eager = x.detach().clone().requires_grad_()
    buf_eager = buf.clone()

    loss_eager = fn(x_eager, buf_eager)
    loss_eager.backward()
    loss = _compile(fn, backend)(x, buf)
    torch.testing.assert_close(loss, loss_eager)
    torch.testing.assert_close(buf, buf_eager)  # the forward's write
    loss.backward()
    torch.testing.assert_close(x.grad, x_eager.grad)
    torch.testing.assert_close(buf, buf_eager)  # untouched by the backward
    assert not buf.requires_grad


@pytest.mark.parametrize("fn", [_whole_buffer])
def test_grad_with_mutated_buffer_inductor_without_donated_buffers(fn, strategy):
    # The same program is right once AOTAutograd does not donate saved activations: the bug
    # above is about donated buffers, not about the values the pass computes.
    x = torch.randn(3, 4, requires_grad=True)
    buf = torch.randn(3, 4)
    x_eager = x.detach().clone().requires_grad_()
    buf_eager = buf.clone()
    fn(x_eager, buf_eager).backward()
    with torch._functorch.config.patch(
        donated_buffer=False, enable_autograd_cache=False
    ), torch._inductor.config.patch(fx_graph_cache=False):
        torch.compile(fn, backend="inductor", fullgraph=True)(x, buf).backward()
    torch.testing.assert_close(x.grad, x_eager.grad)
    torch.testing.assert_close(buf, buf_eager)


class _Model(torch.nn.Module):
    """A Linear layer and a running statistic the op accumulates into (no grad)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("stat", torch.zeros(3, 4))

    def forward(self, x):
        h = self.lin(x)
        corpus.add_(self.stat[0], h[0].detach())
        corpus.add_(self.stat, h.detach() * 0.5)
        return (h * self.stat).tanh().sum()


def _twin_models():
    torch.manual_seed(0)
    eager = _Model()
    other = _Model()
    other.load_state_dict(eager.state_dict())
    return eager, other


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_module_buffer_grads(backend, strategy):
    eager, model = _twin_models()
    x = torch.randn(3, 4)
    eager(x).backward()
    loss = torch.compile(model, backend=backend, fullgraph=True)(x)
    loss.backward()
    torch.testing.assert_close(model.stat, eager.stat)
    assert model.stat.abs().sum() > 0
    for (name, p_eager), p in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, p_eager.grad, msg=name)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_sgd_training_loop(backend, strategy):
    eager, model = _twin_models()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(3, 4)
        for run, o in ((eager, opt_eager), (compiled, opt)):
            o.zero_grad()
            run(x).backward()
            o.step()
    state_eager, state = eager.state_dict(), model.state_dict()
    assert list(state) == list(state_eager)
    for key in state:
        assert same_result(state[key], state_eager[key]), key
    # The loop did train: the parameters moved.
    torch.manual_seed(0)
    assert not torch.equal(model.lin.weight, _Model().lin.weight)


# -- a buffer whose new value the forward saves for the backward (Note [Saved values of written
# inputs]): written in place, and kept out of the memory the backward may reuse ----------------


def _saved_counts(x, counts):
    h = x.sin()
    corpus.add_(counts, h.detach().abs())  # MoE-style token counts
    return (h * counts).sum()  # saves the new counts for the backward


def _inductor_compile(fn):
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from autofunc.inductor import collect_reports

    with (
        inductor_config.patch(fx_graph_cache=False),
        functorch_config.patch(enable_autograd_cache=False),
        collect_reports() as reports,
    ):
        x = torch.randn(16, 16, requires_grad=True)
        counts = torch.zeros(16, 16)
        x_eager, counts_eager = x.detach().clone().requires_grad_(), counts.clone()
        _saved_counts(x_eager, counts_eager).backward()
        loss = torch.compile(fn, fullgraph=True)(x, counts)
        loss.backward()
    return reports, (x, counts), (x_eager, counts_eager)


def test_saved_buffer_written_in_place(strategy):
    reports, (x, counts), (x_eager, counts_eager) = _inductor_compile(_saved_counts)
    (forward,) = [r for r in reports if r.calls]
    assert [d.reason for d in forward.decisions] == [Reason.INPLACE]
    torch.testing.assert_close(x.grad, x_eager.grad)
    torch.testing.assert_close(counts, counts_eager)  # after the backward too


def test_saved_buffer_changed_before_backward_raises_as_in_eager(strategy):
    # The saved tensor is the caller's buffer, so autograd's version check sees the change.
    for fn in (_saved_counts, torch.compile(_saved_counts, fullgraph=True)):
        x, counts = torch.randn(4, 4, requires_grad=True), torch.zeros(4, 4)
        loss = fn(x, counts)
        counts.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()

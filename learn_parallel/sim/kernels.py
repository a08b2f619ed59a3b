"""Kernels the CPU lacks, written out for the CPU tensors behind simulated ones.

- The fused LSTM and GRU cells (and their backward) that PyTorch's recurrent layers
  call on accelerators, and ``record_stream``, which has nothing to do here.
- Random operations without a ``generator`` argument (dropout, ``randn_like`` ...),
  redone with one, so they draw from the simulated device's own generator.
"""

from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten


# Random operations without a ``generator`` argument, redone (as the CPU does
# them) with one: each takes (func, args, kwargs, generator).
def _dropout(func, args, kwargs, gen):
    input, p, train = (list(args) + [kwargs.get("p"), kwargs.get("train")])[:3]
    if not train or p == 0:
        return input.clone(), torch.ones_like(input, dtype=torch.bool)
    if p == 1:
        return torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool)
    mask = torch.empty_like(input, dtype=torch.bool).bernoulli_(1 - p, generator=gen)
    return input * mask * (1.0 / (1 - p)), mask


def _like(fill):
    def draw(func, args, kwargs, gen):
        self, *rest = args
        options = {k: kwargs[k] for k in ("dtype", "memory_format") if kwargs.get(k) is not None}
        return fill(torch.empty_like(self, **options), rest, gen)

    return draw


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """``_thnn_fused_lstm_cell``, the cell PyTorch's LSTM uses on accelerators (no CPU kernel)."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat(
        [
            grad_c * g * i * (1 - i),
            grad_c * cx * f * (1 - f),
            grad_c * i * (1 - g * g),
            grad_hy * tanh_cy * o * (1 - o),
        ],
        1,
    )
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """``_thnn_fused_gru_cell``, the cell PyTorch's GRU uses on accelerators."""
    if input_bias is not None:
        input_gates, hidden_gates = input_gates + input_bias, hidden_gates + hidden_bias
    i_r, i_z, i_n = input_gates.chunk(3, 1)
    h_r, h_z, h_n = hidden_gates.chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, h_n, hx], 1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, h_n, hx = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    biases = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return grad_input, grad_hidden, grad_hy * z, *biases


def _record_stream(tensor: torch.Tensor, stream: Any) -> None:
    """``record_stream`` (torch's Scatter calls it): no caching allocator to tell, no streams."""


# Accelerator-only operations, written out for the CPU tensors behind simulated ones.
ACCELERATOR_ONLY = {
    _aten.record_stream.default: _record_stream,
    _aten._thnn_fused_gru_cell.default: _gru_cell,
    _aten._thnn_fused_gru_cell_backward.default: _gru_cell_backward,
    _aten._thnn_fused_lstm_cell.default: _lstm_cell,
    _aten._thnn_fused_lstm_cell_backward_impl.default: _lstm_cell_backward,
}

RANDOM_WITHOUT_GENERATOR = {
    _aten.native_dropout: _dropout,
    _aten.randn_like: _like(lambda t, rest, gen: t.normal_(generator=gen)),
    _aten.rand_like: _like(lambda t, rest, gen: t.uniform_(generator=gen)),
    _aten.randint_like: _like(
        lambda t, rest, gen: t.random_(*(int(r) for r in rest), generator=gen)
    ),
}

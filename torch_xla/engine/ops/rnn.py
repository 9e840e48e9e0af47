"""Fused RNN cells. PyTorch's LSTM/GRU use the fused cell kernels on every
device but the CPU; these rules give them (and their backward) to XLA. The
workspace holds the post-activation gates, as the CUDA kernels' does."""
import jax
import jax.numpy as jnp

from .registry import lower, meta


@lower("_thnn_fused_lstm_cell")
def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * cx + i * g
    hy = o * jnp.tanh(cy)
    return hy, cy, jnp.concatenate([i, f, g, o], axis=1)


@meta("_thnn_fused_lstm_cell")
def _lstm_cell_meta(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    # PyTorch's own meta kernel fails without biases
    import torch
    return torch.empty_like(cx), torch.empty_like(cx), torch.empty_like(input_gates)


@lower("_thnn_fused_lstm_cell_backward_impl")
def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = jnp.split(workspace, 4, axis=1)
    tcy = jnp.tanh(cy)
    ghy = grad_hy if grad_hy is not None else jnp.zeros_like(cy)
    gcy = (grad_cy if grad_cy is not None else jnp.zeros_like(cy)) + ghy * o * (1 - tcy * tcy)
    d_i = gcy * g * i * (1 - i)
    d_f = gcy * cx * f * (1 - f)
    d_g = gcy * i * (1 - g * g)
    d_o = ghy * tcy * o * (1 - o)
    grad_gates = jnp.concatenate([d_i, d_f, d_g, d_o], axis=1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, gcy * f, grad_bias


@lower("_thnn_fused_gru_cell")
def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = jnp.split(input_gates, 3, axis=1)
    hr, hz, hn = jnp.split(hidden_gates, 3, axis=1)
    r = jax.nn.sigmoid(ir + hr)
    z = jax.nn.sigmoid(iz + hz)
    n = jnp.tanh(in_ + r * hn)
    hy = (1 - z) * n + z * hx
    return hy, jnp.concatenate([r, z, n, hx, hn], axis=1)


@lower("_thnn_fused_gru_cell_backward")
def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, hx, hn = jnp.split(workspace, 5, axis=1)
    d_n = grad_hy * (1 - z) * (1 - n * n)
    d_z = grad_hy * (hx - n) * z * (1 - z)
    d_r = d_n * hn * r * (1 - r)
    grad_input = jnp.concatenate([d_r, d_z, d_n], axis=1)
    grad_hidden = jnp.concatenate([d_r, d_z, d_n * r], axis=1)
    grad_hx = grad_hy * z
    if has_bias:
        return grad_input, grad_hidden, grad_hx, grad_input.sum(0), grad_hidden.sum(0)
    return grad_input, grad_hidden, grad_hx, None, None


def _register_meta():
    """PyTorch has no meta kernels for the fused GRU cell; shapes follow its CUDA kernels."""
    import torch
    lib = torch.library.Library("aten", "IMPL", "Meta")

    def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
        return torch.empty_like(hx), hx.new_empty((hx.shape[0], 5 * hx.shape[1]))

    def gru_cell_backward(grad_hy, workspace, has_bias):
        b, h = grad_hy.shape
        gates = grad_hy.new_empty((b, 3 * h))
        bias = grad_hy.new_empty((3 * h,)) if has_bias else None
        return gates, gates.clone(), torch.empty_like(grad_hy), bias, bias if bias is None else bias.clone()

    for name, fn in (("_thnn_fused_gru_cell", gru_cell), ("_thnn_fused_gru_cell_backward", gru_cell_backward)):
        try:
            lib.impl(name, fn)
        except RuntimeError:
            pass  # this torch has one already
    return lib


_META_LIB = _register_meta()

"""The elementwise part of one time step of ONNX's recurrent layers (LSTM, GRU, RNN).

The importer unrolls a recurrent layer over its (static) sequence: per step, one dense kernel
computes the recurrent product ``H_prev R^T`` plus the step's input projection (computed for all
steps at once, before the loop), and one cell op here applies the gates' activations and updates
the state.  A cell's result stacks what the step produces along a leading axis, ``[K, B, H]``:
the new hidden state, the new cell state (LSTM), and, where ``sequence_lens`` masks steps, the
step's output row (zero past a sequence's end, where the states keep their last values).  Each
of the K slices is contiguous, so the network executor reads them as views (no copy).

Activations follow ONNX's list (``ACTIVATIONS``); ``clip`` bounds every gate's input to
activation to [-clip, clip].  The step's kernels are the same at every step, so a layer of any
length compiles two or three kernels.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from ...dsl.expr import const, select
from ...dsl.intrinsics import elementwise_max, elementwise_min, sigmoid, tanh
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import hard_sigmoid_value, leaky_relu_value, static_shape
from .math import UNARY as MATH_UNARY


def _c(value, v):
    return const(float(value), v.dtype)


def _math(name: str):
    """An activation of ``math.UNARY`` (alpha passed as its attribute)."""
    fn = MATH_UNARY[name][0]
    return lambda v, a, b: fn(v, {"alpha": a})


#: ONNX's recurrent activations: name -> (fn(v, alpha, beta), (default alpha, default beta), how many
#: of activation_alpha / activation_beta it consumes).  Names are matched case-insensitively.
ACTIVATIONS = {
    "sigmoid": (lambda v, a, b: sigmoid(v), (None, None), (0, 0)),
    "tanh": (lambda v, a, b: tanh(v), (None, None), (0, 0)),
    "relu": (lambda v, a, b: elementwise_max(v, _c(0.0, v)), (None, None), (0, 0)),
    "affine": (lambda v, a, b: v * _c(a, v) + _c(b, v), (1.0, 0.0), (1, 1)),
    "leakyrelu": (lambda v, a, b: leaky_relu_value(v, a), (0.01, None), (1, 0)),
    "thresholdedrelu": (_math("thresholded_relu"), (1.0, None), (1, 0)),
    "scaledtanh": (lambda v, a, b: _c(a, v) * tanh(v * _c(b, v)), (1.0, 1.0), (1, 1)),
    "hardsigmoid": (lambda v, a, b: hard_sigmoid_value(v, a, b), (0.2, 0.5), (1, 1)),
    "elu": (_math("elu"), (1.0, None), (1, 0)),
    "softsign": (_math("softsign"), (None, None), (0, 0)),
    "softplus": (_math("softplus"), (None, None), (0, 0)),
}

#: an activation as the cell ops take it: (lower-case name, alpha, beta)
Activation = Tuple[str, Optional[float], Optional[float]]


def _activate(act: Activation, v, clip: Optional[float]):
    name, alpha, beta = act
    if name not in ACTIVATIONS:
        raise ExprError(f"recurrent activation {name!r} is not one of ONNX's ({', '.join(sorted(ACTIVATIONS))})")
    if clip is not None:
        v = elementwise_min(elementwise_max(v, _c(-clip, v)), _c(clip, v))
    return ACTIVATIONS[name][0](v, alpha, beta)


def _check(what: str, t: Tensor, shape) -> None:
    if t is not None and tuple(static_shape(t)) != tuple(shape):
        raise ExprError(f"{what}: expected shape {tuple(shape)}, got {tuple(static_shape(t))}")


def _stack(rows, shape, name: str) -> Tensor:
    """The ``[K, B, H]`` result of a cell: ``rows[k](b, j)`` is slice k's value at (b, j)."""
    k = len(rows)
    batch, hidden = shape

    def body(s, b, j):
        values = [row(b, j) for row in rows]
        out = values[-1]
        for index in range(k - 2, -1, -1):
            out = select(s == index, values[index], out)
        return out
    return compute((k, batch, hidden), body, name=name, tag="elemwise")


def _valid(mask: Tensor, b):
    """Whether the step is inside sequence ``b`` (a bool mask, or a number that is nonzero)."""
    m = mask[b]
    return m if m.dtype == "bool" else m != const(0, m.dtype)


#: ONNX's default activations: LSTM's (f, g, h), GRU's (f, g)
LSTM_ACTIVATIONS = (("sigmoid", None, None), ("tanh", None, None), ("tanh", None, None))
GRU_ACTIVATIONS = LSTM_ACTIVATIONS[:2]


def lstm_cell(gates: Tensor, h_prev: Tensor, c_prev: Tensor, peephole: Optional[Tensor] = None,
              mask: Optional[Tensor] = None, activations: Sequence[Activation] = LSTM_ACTIVATIONS,
              clip: Optional[float] = None, input_forget: bool = False, name: str = "lstm_cell") -> Tensor:
    """``[2 or 3, B, H]``: the new hidden and cell states (and the output row, with ``mask``) from the
    gates' pre-activations ``gates [B, 4H]`` (ONNX's order i, o, f, c; inputs, recurrent products
    and both biases summed), ``c_prev [B, H]``, peepholes ``[3H]`` (i, o, f).  ``input_forget``:
    the forget gate is ``1 - i``.  With ``mask [B]``, a sequence past its end keeps ``h_prev`` and
    ``c_prev`` and outputs zeros."""
    batch, four = static_shape(gates)
    if four % 4:
        raise ExprError(f"lstm_cell: gates of width {four} (4 x hidden expected)")
    hidden = four // 4
    for what, t, shape in (("h_prev", h_prev, (batch, hidden)), ("c_prev", c_prev, (batch, hidden)),
                           ("peephole", peephole, (3 * hidden,)), ("mask", mask, (batch,))):
        _check(f"lstm_cell {what}", t, shape)
    f, g, h = activations

    def peep(k, c, j):
        """Peephole ``k``'s term (i, o, f) of cell state value ``c``; 0 without peepholes."""
        return _c(0.0, c) if peephole is None else c * peephole[k * hidden + j]

    def state(b, j):
        cp = c_prev[b, j]
        gi = gates[b, j] + peep(0, cp, j)
        i = _activate(f, gi, clip)
        if input_forget:
            forget = _c(1.0, cp) - i
        else:
            gf = gates[b, 2 * hidden + j] + peep(2, cp, j)
            forget = _activate(f, gf, clip)
        return forget * cp + i * _activate(g, gates[b, 3 * hidden + j], clip)

    def hidden_state(b, j):
        c = state(b, j)
        go = gates[b, hidden + j] + peep(1, c, j)
        return _activate(f, go, clip) * _activate(h, c, None)

    if mask is None:
        return _stack([hidden_state, state], (batch, hidden), name)
    return _stack([lambda b, j: select(_valid(mask, b), hidden_state(b, j), h_prev[b, j]),
                   lambda b, j: select(_valid(mask, b), state(b, j), c_prev[b, j]),
                   lambda b, j: select(_valid(mask, b), hidden_state(b, j), _c(0.0, c_prev[b, j]))],
                  (batch, hidden), name)


def gru_reset(gates_zr: Tensor, h_prev: Tensor, activation: Activation = ("sigmoid", None, None),
              clip: Optional[float] = None, name: str = "gru_reset") -> Tensor:
    """``r * h_prev`` ``[B, H]``, ``r`` the reset gate of ``gates_zr [B, 2H]`` (z, r pre-activations):
    what a GRU without ``linear_before_reset`` multiplies by its recurrent weight of the new gate."""
    batch, two = static_shape(gates_zr)
    hidden = two // 2
    _check("gru_reset h_prev", h_prev, (batch, hidden))
    return compute((batch, hidden), lambda b, j: _activate(activation, gates_zr[b, hidden + j], clip) * h_prev[b, j],
                   name=name, tag="elemwise")


def gru_cell(gates_zr: Tensor, x_new: Tensor, r_new: Tensor, h_prev: Tensor, mask: Optional[Tensor] = None,
             activations: Sequence[Activation] = GRU_ACTIVATIONS,
             clip: Optional[float] = None, name: str = "gru_cell") -> Tensor:
    """``[1 or 2, B, H]``: the new hidden state (and the output row, with ``mask``) of a GRU without
    ``linear_before_reset``.  ``gates_zr [B, 2H]``: the update and reset gates' pre-activations
    (inputs, recurrent products and biases); ``x_new [B, H]``: the new gate's input part with its
    input bias; ``r_new [B, H]``: its recurrent part, ``(r * h_prev) R^T`` plus its recurrent bias."""
    batch, two = static_shape(gates_zr)
    hidden = two // 2
    for what, t, shape in (("x_new", x_new, (batch, hidden)), ("r_new", r_new, (batch, hidden)),
                           ("h_prev", h_prev, (batch, hidden)), ("mask", mask, (batch,))):
        _check(f"gru_cell {what}", t, shape)
    f, g = activations

    def new_state(b, j):
        z = _activate(f, gates_zr[b, j], clip)
        return _gru_update(z, _activate(g, x_new[b, j] + r_new[b, j], clip), h_prev[b, j])
    return _masked_states(new_state, h_prev, mask, (batch, hidden), name)


def gru_cell_linear_before_reset(x: Tensor, recurrent: Tensor, h_prev: Tensor, mask: Optional[Tensor] = None,
                                 activations: Sequence[Activation] = GRU_ACTIVATIONS,
                                 clip: Optional[float] = None, name: str = "gru_cell") -> Tensor:
    """``gru_cell`` of a GRU with ``linear_before_reset`` (torch's): ``x [B, 3H]`` the input projection
    of the gates z, r, h with their input biases and z's and r's recurrent biases; ``recurrent [B,
    3H]``: ``h_prev R^T`` with the new gate's recurrent bias, one product for all three gates."""
    batch, three = static_shape(x)
    hidden = three // 3
    for what, t, shape in (("recurrent", recurrent, (batch, three)), ("h_prev", h_prev, (batch, hidden)),
                           ("mask", mask, (batch,))):
        _check(f"gru_cell {what}", t, shape)
    f, g = activations

    def new_state(b, j):
        z = _activate(f, x[b, j] + recurrent[b, j], clip)
        r = _activate(f, x[b, hidden + j] + recurrent[b, hidden + j], clip)
        candidate = _activate(g, x[b, 2 * hidden + j] + r * recurrent[b, 2 * hidden + j], clip)
        return _gru_update(z, candidate, h_prev[b, j])
    return _masked_states(new_state, h_prev, mask, (batch, hidden), name)


def _gru_update(z, candidate, hp):
    return (_c(1.0, hp) - z) * candidate + z * hp


def _masked_states(new_state, h_prev: Tensor, mask: Optional[Tensor], shape, name: str) -> Tensor:
    """``[1, B, H]``: ``new_state(b, j)``; with ``mask``, ``[2, B, H]``: the state (``h_prev`` where
    the step is past the sequence's end) and the output row (zero there)."""
    if mask is None:
        return _stack([new_state], shape, name)
    return _stack([lambda b, j: select(_valid(mask, b), new_state(b, j), h_prev[b, j]),
                   lambda b, j: select(_valid(mask, b), new_state(b, j), _c(0.0, h_prev[b, j]))], shape, name)


def rnn_cell(gates: Tensor, h_prev: Tensor, mask: Optional[Tensor] = None,
             activation: Activation = ("tanh", None, None), clip: Optional[float] = None,
             name: str = "rnn_cell") -> Tensor:
    """``[1 or 2, B, H]``: ``f(gates)`` (inputs, recurrent product and biases summed) as the new
    hidden state (and the output row, with ``mask``)."""
    batch, hidden = static_shape(gates)
    for what, t, shape in (("h_prev", h_prev, (batch, hidden)), ("mask", mask, (batch,))):
        _check(f"rnn_cell {what}", t, shape)

    def new_state(b, j):
        return _activate(activation, gates[b, j], clip)
    return _masked_states(new_state, h_prev, mask, (batch, hidden), name)

"""Converters for ONNX's recurrent layers, LSTM, GRU and RNN, unrolled over the sequence.

The sequence length is static (a symbolic one compiles per shape), so each layer becomes:

* one ``dense`` over all steps' inputs at once, ``X [S*B, I]`` by the input weights with the biases
  that can be folded in (GRU without ``linear_before_reset``: two, the update/reset gates' and the
  new gate's, so every step's slice of each is a contiguous block);
* per step, one ``dense`` of the previous hidden state by the recurrent weight with the step's
  input projection added in its epilogue, and one cell op (``nn_ops/ops/recurrent.py``) that
  applies the activations and stacks the new states ``[K, B, H]`` (GRU without
  ``linear_before_reset``: a ``gru_reset`` and a second dense first);
* ``Y`` from a concat of the steps' cells in time order, which the executor computes in place
  (each cell writes its slot), then one strided copy of the output rows; ``Y_h``/``Y_c`` from the
  last states.

The per-step slices (a step's rows of the input projection, a cell's states, a step's mask) are
contiguous, and the executor reads them as views of their source (``network/passes/slices_as_views.py``),
so they cost no kernel; every step runs the same two (or four) kernels, compiled once.
``sequence_lens`` (a graph input or a constant) masks the steps past each sequence's end: the
states keep their last values and ``Y`` is zero there, as onnxruntime does.  Both directions
(``bidirectional``), ``layout=1`` (batch first), initial states, peepholes, ``clip``,
``input_forget``, ``linear_before_reset`` and every activation of ONNX's list are supported.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ...ops.recurrent import ACTIVATIONS
from ..context import ImportContext, Unsupported, converter, optional_input, optional_output

#: the longest sequence unrolled: each step adds a few graph nodes and kernel calls (1000 steps
#: compile in ~3 s); a longer one, as a hostile model may declare, would hold the compile for minutes
MAX_UNROLLED_STEPS = 10_000
#: the default activations of each layer, per direction
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
#: gates per layer (rows of W and R per direction, in hidden sizes)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class _Layer:
    """What every recurrent converter reads: sizes, weights, states and the emit helpers."""

    def __init__(self, ctx: ImportContext, node):
        self.ctx, self.node, self.kind = ctx, node, node.op_type
        ctx.require_float_input(node)
        self.out = next((o for o in node.output if o), node.name or self.kind)
        direction = ctx.attr(node, "direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise Unsupported(f"direction {direction!r} (forward, reverse or bidirectional)")
        self.reverse_only = direction == "reverse"
        self.directions = 2 if direction == "bidirectional" else 1
        self.layout = int(ctx.attr(node, "layout", 0))
        if self.layout not in (0, 1):
            raise Unsupported(f"layout {self.layout} (0 or 1)")
        x_shape = ctx.shape(node.input[0])
        if len(x_shape) != 3:
            raise Unsupported(f"input X of rank {len(x_shape)} (3 expected: sequence, batch, input)")
        self.seq, self.batch, self.input_size = (x_shape[1], x_shape[0], x_shape[2]) if self.layout else x_shape
        if min(self.seq, self.batch, self.input_size) < 1:
            raise Unsupported(f"input X of shape {tuple(x_shape)} (a sequence, batch and input of at least 1)")
        if self.seq > MAX_UNROLLED_STEPS:
            raise Unsupported(f"a sequence of {self.seq} steps: recurrent layers are unrolled, up to "
                              f"{MAX_UNROLLED_STEPS} steps (run a longer one in chunks, passing the final "
                              f"states as the next chunk's initial_h / initial_c)")
        self.dtype = ctx.dtype(node.input[0])
        gates = GATES[self.kind]
        self.W = ctx.require_const(node, 1, "W")
        self.R = ctx.require_const(node, 2, "R")
        hidden = ctx.attr(node, "hidden_size")
        self.hidden = int(hidden) if hidden is not None else self.R.shape[-1]
        if self.hidden < 1:
            raise Unsupported(f"hidden_size {self.hidden} (at least 1)")
        expected = {"W": (self.directions, gates * self.hidden, self.input_size),
                    "R": (self.directions, gates * self.hidden, self.hidden)}
        for what, value in (("W", self.W), ("R", self.R)):
            if tuple(value.shape) != expected[what]:
                raise Unsupported(f"{what} of shape {tuple(value.shape)}; with {self.directions} direction(s), "
                                  f"hidden_size {self.hidden} and input size {self.input_size} it must be "
                                  f"{expected[what]}")
        b_name = optional_input(node, 3)
        bias_shape = (self.directions, 2 * gates * self.hidden)
        self.B = ctx.require_const(node, 3, "B") if b_name else np.zeros(bias_shape, self.W.dtype)
        if tuple(self.B.shape) != bias_shape:
            raise Unsupported(f"B of shape {tuple(self.B.shape)} ({bias_shape} expected)")
        clip = ctx.attr(node, "clip")
        self.clip = float(clip) if clip is not None else None
        if self.clip is not None and not self.clip > 0:
            raise Unsupported(f"clip {self.clip} (a positive threshold)")
        self.activations = self._activations()
        self.mask = self._mask()
        self.x2d = self._sequence_input()

    # ---------------------------------------------------------------- attributes
    def _activations(self) -> List[list]:
        """Per direction, the activations as ``(name, alpha, beta)``, alphas and betas taken in
        order by the functions that have them (onnxruntime's reading of the spec)."""
        per = len(_DEFAULT_ACTIVATIONS[self.kind])
        names = self.ctx.attr(self.node, "activations")
        names = list(names) if names else list(_DEFAULT_ACTIVATIONS[self.kind]) * self.directions
        if len(names) == per and self.directions == 2:
            names = names * 2
        if len(names) != per * self.directions:
            raise Unsupported(f"{len(names)} activations ({per} per direction, {self.directions} direction(s))")
        alphas = list(self.ctx.attr(self.node, "activation_alpha", []) or [])
        betas = list(self.ctx.attr(self.node, "activation_beta", []) or [])
        result = []
        for name in names:
            name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            key = name.lower()
            if key not in ACTIVATIONS:
                raise Unsupported(f"activation {name!r} (one of {', '.join(sorted(ACTIVATIONS))})")
            _, (alpha, beta), (takes_alpha, takes_beta) = ACTIVATIONS[key]
            if takes_alpha and alphas:
                alpha = float(alphas.pop(0))
            if takes_beta and betas:
                beta = float(betas.pop(0))
            result.append((key, alpha, beta))
        return [result[d * per:(d + 1) * per] for d in range(self.directions)]

    def _mask(self) -> Optional[str]:
        """``[S, B]`` bool: whether step t is inside sequence b; None when every sequence is whole."""
        lens = optional_input(self.node, 4)
        if lens is None:
            return None
        value = self.ctx.const(lens)
        if value is not None:
            if value.shape != (self.batch,):
                raise Unsupported(f"sequence_lens of shape {value.shape} ({(self.batch,)} expected)")
            if np.any(value < 0) or np.any(value > self.seq):
                raise Unsupported(f"sequence_lens {value.tolist()} outside 0..{self.seq}")
            if np.all(value == self.seq):
                return None
        steps = self.ctx.add_constant(self.out + ".steps", np.arange(self.seq, dtype=np.int64).reshape(self.seq, 1))
        lens64 = lens
        if self.ctx.dtype(lens) != "int64":
            lens64 = self.ctx.emit("cast", [lens], self.ctx.temp(self.out, "lens64"), {"to": "int64"})
        row = self.ctx.emit("reshape", [lens64], self.ctx.temp(self.out, "lens_row"), {"shape": (1, self.batch)})
        return self.ctx.emit("less", [steps, row], self.ctx.temp(self.out, "mask"))

    # ---------------------------------------------------------------- emit helpers
    def emit(self, op: str, inputs, tag: str, attrs=None) -> str:
        return self.ctx.emit(op, inputs, self.ctx.temp(self.out, tag), attrs)

    def constant(self, tag: str, array: np.ndarray) -> str:
        return self.ctx.add_constant(f"{self.out}.{tag}", np.ascontiguousarray(array, dtype=self.dtype))

    def rows(self, value: str, begin: int, count: int, tag: str) -> str:
        """Rows ``begin .. begin+count`` of a value's leading axis (a view where the executor can)."""
        shape = list(self.ctx.shape(value))
        end = [begin + count] + shape[1:]
        return self.emit("slice", [value], tag, {"begin": (begin,) + (0,) * (len(shape) - 1), "end": tuple(end),
                                                 "step": (1,) * len(shape)})

    def flat(self, value: str, shape: Sequence[int], tag: str) -> str:
        return self.emit("reshape", [value], tag, {"shape": tuple(shape)})

    def dense(self, x: str, weight: str, bias: Optional[str], tag: str, add: Optional[str] = None) -> str:
        """``x @ weight.T (+ bias) (+ add)``: ``weight [N, K]`` and ``bias [N]`` constants, named once
        for every step to share."""
        y = self.emit("dense", [x, weight] + ([bias] if bias else []), tag)
        return self.emit("add", [y, add], tag + ".sum") if add is not None else y

    def project(self, d: int, rows: slice, recurrent_bias: Optional[np.ndarray], tag: str) -> str:
        """Every step's input projection ``[S*B, len(rows)]`` by W's rows ``rows`` of direction ``d``,
        their input bias added (and ``recurrent_bias``, the recurrent biases that can be added there)."""
        gates = self.W.shape[1]
        bias = self.B[d, :gates][rows] + (0 if recurrent_bias is None else recurrent_bias)
        return self.dense(self.x2d, self.constant(f"w{tag}{d}", self.W[d, rows]),
                          self.constant(f"b{tag}{d}", bias), f"x{tag}{d}")

    def step_rows(self, projection: str, t: int, tag: str) -> str:
        """Step ``t``'s rows ``[B, N]`` of an input projection ``[S*B, N]``."""
        return self.rows(projection, t * self.batch, self.batch, tag)

    # ---------------------------------------------------------------- inputs and outputs
    def _sequence_input(self) -> str:
        """X as ``[S*B, I]`` in step order."""
        x = self.node.input[0]
        if self.layout:
            x = self.emit("transpose", [x], "x_sbi", {"perm": (1, 0, 2)})
        return self.flat(x, (self.seq * self.batch, self.input_size), "x2d")

    def initial(self, index: int, direction: int, tag: str) -> str:
        """Initial state ``index`` (5: initial_h, 6: initial_c) of ``direction`` as ``[B, H]``; zeros if absent."""
        name = optional_input(self.node, index)
        if name is None:
            return self.constant(f"{tag}{direction}.zero", np.zeros((self.batch, self.hidden)))
        shape = tuple(self.ctx.shape(name))
        expected = (self.batch, self.directions, self.hidden) if self.layout else \
            (self.directions, self.batch, self.hidden)
        if shape != expected:
            raise Unsupported(f"input {index} ({name!r}) of shape {shape} ({expected} expected)")
        if self.layout:
            name = self.emit("transpose", [name], f"{tag}.dbh", {"perm": (1, 0, 2)})
        part = self.rows(name, direction, 1, f"{tag}{direction}")
        return self.flat(part, (self.batch, self.hidden), f"{tag}{direction}.bh")

    def step_mask(self, t: int) -> Optional[str]:
        if self.mask is None:
            return None
        return self.flat(self.rows(self.mask, t, 1, f"mask{t}"), (self.batch,), f"mask{t}.b")

    def order(self, direction: int) -> range:
        backward = self.reverse_only or direction == 1
        return range(self.seq - 1, -1, -1) if backward else range(self.seq)

    def unroll(self, start) -> None:
        """Unroll every direction and write the outputs.  ``start(d)`` gives direction ``d``'s initial
        states (h, or h and c) and its step, ``step(t, states, mask) -> cell``: a cell op whose result
        stacks the new states, then (with a mask) the step's output row."""
        cells_per_direction, finals = [], []
        for d in range(self.directions):
            states, step = start(d)
            cells = [None] * self.seq
            for t in self.order(d):
                cells[t] = step(t, states, self.step_mask(t))
                states = self._states(cells[t], len(states), f"cell{d}_{t}")
            cells_per_direction.append(cells)
            finals.append(states)
        self._finish(cells_per_direction, len(finals[0]) if self.mask else 0, list(zip(*finals)))

    def _states(self, cell: str, count: int, tag: str) -> List[str]:
        """The first ``count`` slices ``[B, H]`` of a cell's stacked result (views of it)."""
        if count == 1 and self.mask is None:
            return [self.flat(cell, (self.batch, self.hidden), f"{tag}.r0")]
        return [self.flat(self.rows(cell, k, 1, f"{tag}.s{k}"), (self.batch, self.hidden), f"{tag}.r{k}")
                for k in range(count)]

    def _finish(self, cells_per_direction, y_row: int, finals) -> None:
        """Write Y from each direction's cells (by time; row ``y_row`` of each is the step's output),
        and Y_h / Y_c from the final states ``finals[k][direction]``.

        A direction's cells are concatenated in time order: a concat the executor computes in place
        (``network/passes/concats_in_place.py``: each cell kernel writes its states straight into its
        slot), so Y is one strided copy of those rows, not a copy per step."""
        y = optional_output(self.node, 0)
        if y is not None:
            per_direction = []
            for d, cells in enumerate(cells_per_direction):
                rows = self.ctx.shape(cells[0])[0]
                stacked = self.emit("concat", cells, f"states{d}", {"axis": 0}) if len(cells) > 1 else cells[0]
                grid = self.flat(stacked, (self.seq, rows, self.batch, self.hidden), f"states{d}.grid")
                window = {"begin": (0, y_row, 0, 0), "end": (self.seq, y_row + 1, self.batch, self.hidden),
                          "step": (1, 1, 1, 1)}
                per_direction.append(grid if rows == 1 else self.emit("slice", [grid], f"y{d}", window))
            self._output(per_direction, 1, y, (2, 0, 1, 3), "y_sdbh")
        for k, states in enumerate(finals):
            out = optional_output(self.node, 1 + k)
            if out is not None:
                pieces = [self.flat(s, (1, self.batch, self.hidden), f"final{k}_{d}") for d, s in enumerate(states)]
                self._output(pieces, 0, out, (1, 0, 2), f"final{k}")

    def _output(self, per_direction: List[str], axis: int, out: str, batch_first: tuple, tag: str) -> None:
        """Graph output ``out``: the directions' parts joined along ``axis``, transposed by
        ``batch_first`` with ``layout=1``."""
        joined = self.emit("concat", per_direction, tag, {"axis": axis}) if len(per_direction) > 1 \
            else per_direction[0]
        if self.layout:
            self.ctx.emit("transpose", [joined], out, {"perm": batch_first}, name=self.node.name)
        else:
            self.ctx.emit("identity", [joined], out, name=self.node.name)


@converter("LSTM", since=7)
def lstm(ctx: ImportContext, node):
    layer = _Layer(ctx, node)
    hid = layer.hidden
    input_forget = bool(int(ctx.attr(node, "input_forget", 0)))
    p_value = ctx.require_const(node, 7, "P") if optional_input(node, 7) else None
    if p_value is not None and tuple(p_value.shape) != (layer.directions, 3 * hid):
        raise Unsupported(f"P of shape {tuple(p_value.shape)} ({(layer.directions, 3 * hid)} expected)")

    def start(d):
        projected = layer.project(d, slice(None), layer.B[d, 4 * hid:], "w")
        r = layer.constant(f"r{d}", layer.R[d])
        peep = [layer.constant(f"p{d}", p_value[d])] if p_value is not None else []
        attrs = {"activations": tuple(layer.activations[d]), "clip": layer.clip, "input_forget": input_forget,
                 "peephole": bool(peep), "masked": layer.mask is not None}

        def step(t, states, mask):
            h, c = states
            gates = layer.dense(h, r, None, f"g{d}_{t}", add=layer.step_rows(projected, t, f"x{d}_{t}"))
            return layer.emit("lstm_cell", [gates, h, c] + peep + ([mask] if mask else []), f"cell{d}_{t}", attrs)
        return [layer.initial(5, d, "h0_"), layer.initial(6, d, "c0_")], step
    layer.unroll(start)


@converter("GRU", since=7)
def gru(ctx: ImportContext, node):
    layer = _Layer(ctx, node)
    hid = layer.hidden
    before_reset = bool(int(ctx.attr(node, "linear_before_reset", 0)))

    def start(d):
        rb = layer.B[d, 3 * hid:]
        f_act, g_act = layer.activations[d]
        attrs = {"activations": (f_act, g_act), "clip": layer.clip, "masked": layer.mask is not None}
        if before_reset:
            # torch's GRU: one recurrent product for the three gates, the new gate's recurrent bias
            # with it (it is multiplied by r), z's and r's at the input
            x_all = layer.project(d, slice(None), np.concatenate([rb[:2 * hid], np.zeros(hid, rb.dtype)]), "w")
            r_all = layer.constant(f"r{d}", layer.R[d])
            r_bias = layer.constant(f"rb{d}", np.concatenate([np.zeros(2 * hid, rb.dtype), rb[2 * hid:]]))

            def step(t, states, mask):
                (h,) = states
                inputs = [layer.step_rows(x_all, t, f"x{d}_{t}"), layer.dense(h, r_all, r_bias, f"hr{d}_{t}"), h]
                return layer.emit("gru_cell_linear_before_reset", inputs + ([mask] if mask else []), f"cell{d}_{t}",
                                  attrs)
        else:
            # the update/reset gates take both biases at the input; the new gate its input bias
            # there, its recurrent one with its recurrent product of r * h
            x_zr = layer.project(d, slice(0, 2 * hid), rb[:2 * hid], "zr")
            x_new = layer.project(d, slice(2 * hid, 3 * hid), None, "h")
            r_zr = layer.constant(f"rzr{d}", layer.R[d, :2 * hid])
            r_new = layer.constant(f"rh{d}", layer.R[d, 2 * hid:])
            r_bias = layer.constant(f"rbh{d}", rb[2 * hid:])

            def step(t, states, mask):
                (h,) = states
                zr = layer.dense(h, r_zr, None, f"zr{d}_{t}", add=layer.step_rows(x_zr, t, f"xzr{d}_{t}"))
                reset = layer.emit("gru_reset", [zr, h], f"rh{d}_{t}", {"activation": f_act, "clip": layer.clip})
                inputs = [zr, layer.step_rows(x_new, t, f"xh{d}_{t}"),
                          layer.dense(reset, r_new, r_bias, f"hr{d}_{t}"), h]
                return layer.emit("gru_cell", inputs + ([mask] if mask else []), f"cell{d}_{t}", attrs)
        return [layer.initial(5, d, "h0_")], step
    layer.unroll(start)


@converter("RNN", since=7)
def rnn(ctx: ImportContext, node):
    layer = _Layer(ctx, node)

    def start(d):
        projected = layer.project(d, slice(None), layer.B[d, layer.hidden:], "w")
        r = layer.constant(f"r{d}", layer.R[d])
        attrs = {"activation": layer.activations[d][0], "clip": layer.clip, "masked": layer.mask is not None}

        def step(t, states, mask):
            (h,) = states
            gates = layer.dense(h, r, None, f"g{d}_{t}", add=layer.step_rows(projected, t, f"x{d}_{t}"))
            return layer.emit("rnn_cell", [gates, h] + ([mask] if mask else []), f"cell{d}_{t}", attrs)
        return [layer.initial(5, d, "h0_")], step
    layer.unroll(start)

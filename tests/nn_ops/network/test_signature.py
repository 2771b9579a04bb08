"""A feed checked against a symbolic signature (``network/signature.py``): every mismatch is an
ArgumentError that names the input and the symbol; recorded run-time checks name the node."""
import numpy as np
import pytest
import sympy

import loopweave as lw
from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.signature import RuntimeCheck, SymbolicSignature

SEQ, SEQ_K, N = S.symbol("seq"), S.symbol("seq_k"), S.symbol("N")


@pytest.fixture
def signature():
    inputs = [("ids", ("N", "seq"), "int64"), ("mask", ("N", "seq"), "float32"), ("memory", ("N", "seq_k", 8),
                                                                                  "float32")]
    check = RuntimeCheck("attn", "Add", sympy.Or(sympy.Eq(SEQ, SEQ_K), sympy.Eq(SEQ_K, 1)),
                         "sizes seq and seq_k do not broadcast")
    outputs = [("out", (N, SEQ * 2, 8), "float32")]
    return SymbolicSignature([(n, tuple(S.dim(d) for d in s), dt) for n, s, dt in inputs], outputs, [check])


def feed(n=2, seq=5, seq_k=5, **over):
    f = {"ids": np.zeros((n, seq), np.int64), "mask": np.zeros((n, seq), np.float32),
         "memory": np.zeros((n, seq_k, 8), np.float32)}
    f.update(over)
    return f


def test_a_consistent_feed_binds_every_symbol(signature):
    binding = signature.bind(feed(2, 7, 3))
    assert binding == {"N": 2, "seq": 7, "seq_k": 3}
    assert signature.symbols == ["N", "seq", "seq_k"]
    assert signature.output_shapes(binding) == [(2, 14, 8)]


def test_a_symbol_bound_twice_names_both_inputs_and_the_symbol(signature):
    with pytest.raises(lw.ArgumentError, match=r"input 'mask' dimension 1 is 'seq' = 64, but input 'ids' "
                                               r"dimension 1 set 'seq' = 128"):
        signature.bind(feed(seq=128, mask=np.zeros((2, 64), np.float32)))


def test_rank_dtype_fixed_size_and_empty_are_refused(signature):
    with pytest.raises(lw.ArgumentError, match=r"input 'memory' must have rank 3 \(shape \[N, seq_k, 8\]\)"):
        signature.bind(feed(memory=np.zeros((2, 5), np.float32)))
    with pytest.raises(lw.ArgumentError, match="input 'mask' must have dtype float32"):
        signature.bind(feed(mask=np.zeros((2, 5), np.float64)))
    with pytest.raises(lw.ArgumentError, match=r"input 'memory' must have shape \[N, seq_k, 8\], got \(2, 5, 9\) "
                                               r"\(dimension 2 must be 8\)"):
        signature.bind(feed(memory=np.zeros((2, 5, 9), np.float32)))
    with pytest.raises(lw.ArgumentError, match=r"input 'ids' has size 0 in dimension 1 \('seq'\)"):
        signature.bind(feed(seq=0))


def test_recorded_checks_name_the_node_and_the_values(signature):
    signature.check(signature.bind(feed(seq=5, seq_k=5)))
    signature.check(signature.bind(feed(seq=5, seq_k=1)))
    with pytest.raises(lw.ArgumentError, match=r"node 'attn' \(Add\): sizes seq and seq_k do not broadcast "
                                               r"\(here seq = 5, seq_k = 3\)"):
        signature.check(signature.bind(feed(seq=5, seq_k=3)))


def test_a_derived_input_size_is_checked_after_the_symbols():
    sig = SymbolicSignature([("a", (N, SEQ), "float32"), ("b", (N, 2 * SEQ), "float32")], [], [])
    assert sig.bind({"a": np.zeros((1, 3), np.float32), "b": np.zeros((1, 6), np.float32)}) == {"N": 1, "seq": 3}
    with pytest.raises(lw.ArgumentError, match=r"input 'b' dimension 1 must be 2\*seq = 6 \(seq = 3\), got 7"):
        sig.bind({"a": np.zeros((1, 3), np.float32), "b": np.zeros((1, 7), np.float32)})


def test_a_binding_that_passed_is_not_checked_again_and_a_bad_one_always_is(signature, monkeypatch):
    """The checks are exact sympy arithmetic, per run: a binding that passed recently skips them."""
    calls = []
    holds = RuntimeCheck.holds
    monkeypatch.setattr(RuntimeCheck, "holds", lambda self, b: calls.append(b) or holds(self, b))
    good, bad = {"N": 2, "seq": 5, "seq_k": 5}, {"N": 2, "seq": 5, "seq_k": 3}
    signature.check(good)
    signature.check(good)
    assert len(calls) == 1
    for _ in range(2):
        with pytest.raises(lw.ArgumentError, match="seq and seq_k"):
            signature.check(bad)
    assert len(calls) == 3

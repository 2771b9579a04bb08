"""The runtime module (backends/runtime.py): argument checks before native code, time, get_source."""
import numpy as np
import pytest

import loopweave as lw


@pytest.fixture(scope="module")
def add():
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n, m), name="A")
    B = lw.placeholder((m,), name="B")
    C = lw.compute((n, m), lambda i, j: A[i, j] + B[j], name="C")
    return lw.build(lw.create_schedule(C), [A, B, C])


@pytest.fixture
def arrays():
    a = np.arange(12, dtype="float32").reshape(3, 4)
    b = np.ones(4, "float32")
    c = np.full((3, 4), -1.0, "float32")
    return a, b, c


def _untouched(c):
    return np.all(c == -1.0)


def test_valid_call_computes(add, arrays):
    a, b, c = arrays
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_signature_repr(add):
    assert "main(A: float32[n, m], B: float32[m], C: float32[n, m])" in repr(add)
    assert [p.name for p in add.params] == ["A", "B", "C"]
    assert [p.is_output for p in add.params] == [False, False, True]
    assert add.size_names == ["n", "m"]


def test_wrong_dtype(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must have dtype float32, got float64.*astype\('float32'\)"):
        add(a.astype("float64"), b, c)
    assert _untouched(c)


def test_wrong_rank(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError, match=r"argument 'B' must have 1 dimensions, got 2 \(shape \(1, 4\)\)"):
        add(a, b.reshape(1, 4), c)


def test_inconsistent_symbolic_size(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError,
                       match=r"argument 'B' has shape \(5,\), but dimension 0 must be m = 4 \(from the other arguments: n=3, m=4\)"):
        add(a, np.ones(5, "float32"), c)
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' has shape \(2, 4\), but dimension 0 must be n = 3"):
        add(a, b, np.empty((2, 4), "float32"))
    assert _untouched(c)


def test_non_contiguous(add, arrays):
    a, b, c = arrays
    strided = np.ones((3, 8), "float32")[:, ::2]
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must be C-contiguous; pass np.ascontiguousarray"):
        add(strided, b, c)
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' must be C-contiguous"):
        add(a, b, np.empty((4, 3), "float32").T)


def test_not_an_ndarray(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError, match=r"argument 'B' must be a numpy.ndarray, got list"):
        add(a, [1.0, 1.0, 1.0, 1.0], c)
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must be a numpy.ndarray, got float"):
        add(1.0, b, c)


def test_read_only_output(add, arrays):
    a, b, c = arrays
    c.flags.writeable = False
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' is written by main but is read-only"):
        add(a, b, c)
    assert _untouched(c)


def test_read_only_input_is_fine(add, arrays):
    a, b, c = arrays
    a.flags.writeable = False
    add(a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_too_few_and_too_many(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError, match=r"main takes 3 arrays \(A, B, C\), got 2: missing argument\(s\) 'C'"):
        add(a, b)
    with pytest.raises(lw.ArgumentError, match=r"got 4: 1 extra argument\(s\) after 'C'"):
        add(a, b, c, c)
    with pytest.raises(lw.ArgumentError, match=r"got 0: missing argument\(s\) 'A', 'B', 'C'"):
        add()


def test_constant_shape_mismatch():
    A = lw.placeholder((4,), name="A")
    B = lw.compute((4,), lambda i: A[i] + 1.0, name="B")
    f = lw.build(lw.create_schedule(B), [A, B])
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must have shape \(4\), got \(5,\) \(dimension 0 should be 4\)"):
        f(np.ones(5, "float32"), np.empty(4, "float32"))


def test_derived_shape_expression_is_checked():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n - 2,), lambda i: A[i] + A[i + 2], name="B")
    f = lw.build(lw.create_schedule(B), [A, B])
    a = np.arange(10, dtype="float32")
    b = np.empty(8, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a[:-2] + a[2:])
    with pytest.raises(lw.ArgumentError, match=r"argument 'B' has shape \(9,\), but dimension 0 must be n - 2 = 8"):
        f(a, np.empty(9, "float32"))


def test_time_returns_positive_float(add, arrays):
    t = add.time(*arrays, repeat=3, min_seconds=0.005)
    assert isinstance(t, float) and 0 < t < 1


def test_time_checks_arguments_too(add, arrays):
    a, b, c = arrays
    with pytest.raises(lw.ArgumentError, match="argument 'A' must have dtype float32"):
        add.time(a.astype("int32"), b, c)


def test_get_source(add):
    ll = add.get_source("ll")
    assert "define" in ll and add.symbol in ll
    asm = add.get_source("asm")
    assert add.symbol in asm
    lowered = add.get_source("lowered")
    assert lowered.startswith("def main(A: float32[n, m]")
    assert "define" in add.get_source("ll-opt")
    assert add.get_source() == ll
    with pytest.raises(lw.ArgumentError, match="no source of kind 'zz'; kinds: lowered, ll, ll-opt, asm"):
        add.get_source("zz")


def test_module_html(add):
    html = add._repr_html_()
    assert isinstance(html, str) and "main" in html


@pytest.fixture(scope="module")
def static_add():
    """Static shapes: calls take the fast check path (``Module._static_ok``)."""
    A = lw.placeholder((3, 4), name="A")
    B = lw.placeholder((4,), name="B")
    C = lw.compute((3, 4), lambda i, j: A[i, j] + B[j], name="C")
    return lw.build(lw.create_schedule(C), [A, B, C])


def test_static_fast_path_accepts_and_computes(static_add, arrays):
    a, b, c = arrays
    assert static_add._static_ok((a, b, c))
    static_add(a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("bad, message", [
    (lambda a, b, c: (a.astype("float64"), b, c), r"argument 'A' must have dtype float32, got float64"),
    (lambda a, b, c: (a, b, c.T.copy().T), r"argument 'C' must be C-contiguous"),
    (lambda a, b, c: (a, b[:3], c), r"argument 'B' must have shape \(4\), got \(3,\)"),
    (lambda a, b, c: (a, b, np.ones((3, 4), "float32")[:, :].view()), None),
    (lambda a, b, c: (a, b, a), r"argument 'C' is written by .* and overlaps argument 'A'"),
    (lambda a, b, c: (a, c[0], c), r"argument 'C' is written by .* and overlaps argument 'B'"),
    (lambda a, b, c: (a.tolist(), b, c), r"argument 'A' must be a numpy.ndarray, got list"),
])
def test_static_fast_path_falls_back_to_named_errors(static_add, arrays, bad, message):
    args = bad(*arrays)
    if message is None:    # a view is fine
        assert static_add._static_ok(args)
        return
    assert not static_add._static_ok(args)
    with pytest.raises(lw.ArgumentError, match=message):
        static_add(*args)


def test_static_fast_path_read_only_output(static_add, arrays):
    a, b, c = arrays
    c.flags.writeable = False
    assert not static_add._static_ok((a, b, c))
    with pytest.raises(lw.ArgumentError, match="read-only"):
        static_add(a, b, c)


def test_data_pointer_matches_numpy():
    from loopweave.backends.runtime import data_pointer
    base = np.arange(40, dtype="float32").reshape(5, 8)
    for a in [base, base[2:], base[1:, 3:], base.T, np.empty(0, "int8"), np.ones((), "float32")]:
        assert data_pointer(a) == a.ctypes.data


def test_a_size_seen_only_as_a_multiple_is_bound_from_the_shape_or_refused_by_name():
    T = lw.var("T")
    X = lw.placeholder((T * 14, 2 * T), name="X")
    Y = lw.compute(X.shape, lambda i, j: X[i, j] * 2, name="Y")
    mod = lw.build(lw.create_schedule(Y), [X, Y])
    x = np.arange(28 * 4, dtype=np.float32).reshape(28, 4)
    out = np.zeros_like(x)
    mod(x, out)
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(lw.ArgumentError, match=r"dimension 0 must be T \* 14 for a whole number T"):
        mod(np.zeros((15, 3), np.float32), np.zeros((15, 3), np.float32))
    with pytest.raises(lw.ArgumentError, match="dimension 1"):
        mod(np.zeros((28, 3), np.float32), np.zeros((28, 3), np.float32))

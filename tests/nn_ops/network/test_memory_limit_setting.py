"""LOOPWEAVE_MAX_TENSOR_BYTES is understood (bytes, or a binary unit: 8G, 512MiB) or refused with an
error naming it; never ignored."""
import pytest

import loopweave as lw
from loopweave.errors import ArgumentError
from loopweave.nn_ops.network.limits import memory_limit_bytes


@pytest.mark.parametrize("text, nbytes", [("8G", 8 << 30), ("512MiB", 512 << 20), ("64k", 64 << 10),
                                          ("123456", 123456), (" 2 GB ", 2 << 30), ("1t", 1 << 40)])
def test_sizes_with_units_are_understood(monkeypatch, text, nbytes):
    monkeypatch.setenv("LOOPWEAVE_MAX_TENSOR_BYTES", text)
    assert memory_limit_bytes() == nbytes
    with lw.memory_limit(1000):                # the explicit setting still wins
        assert memory_limit_bytes() == 1000


@pytest.mark.parametrize("text", ["8X", "1.5G", "-1", "lots", "G", "8 G B"])
def test_anything_else_is_refused(monkeypatch, text):
    monkeypatch.setenv("LOOPWEAVE_MAX_TENSOR_BYTES", text)
    with pytest.raises(ArgumentError, match=r"LOOPWEAVE_MAX_TENSOR_BYTES=.* is not a size: give a number of bytes"):
        memory_limit_bytes()

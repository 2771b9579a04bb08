"""``python -m benchmarks.int8_products``: it checks each kernel's product before timing it and prints a
row per shape for each level this machine runs."""
import pytest

from benchmarks import int8_products
from loopweave.target import native_target

pytestmark = pytest.mark.skipif(native_target().arch != "x86_64", reason="x86 levels need an x86 CPU")


def test_it_prints_both_kernels_and_the_ratio_for_an_avx2_level(capsys, monkeypatch):
    monkeypatch.setattr(int8_products, "SHAPES", ((8, 64, 48),))
    int8_products.main(["--threads", "1", "--pairs", "1", "--targets", "llvm -mcpu=x86-64-v3"])
    out = capsys.readouterr().out
    assert "networks use pairs" in out and "pairs/words" in out
    assert out.count("8 x   64 x   48") == 1

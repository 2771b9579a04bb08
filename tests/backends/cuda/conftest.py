"""``simt``: run the generated CUDA C on the CPU (``simt.py``), one fiber per GPU thread, to test it
without a GPU: the CUDA C itself (operators, floor division, vector accesses) and the per-block,
cooperative execution of shared-memory stages, which the CPU emulation of a schedule cannot show.
"""
import shutil

import pytest

from .simt import loader


@pytest.fixture(scope="session")
def simt_compiler(tmp_path_factory):
    """(g++, a folder for the compiled kernels)."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to run generated CUDA C on the CPU")
    return cxx, tmp_path_factory.mktemp("simt")


@pytest.fixture(scope="session")
def simt(simt_compiler):
    """``simt(module)``: a callable running CUDA module ``module``'s kernels on the CPU with numpy arrays."""
    return loader(*simt_compiler)

"""Without the torch extra: ``import loopweave`` stays torch-free, and ``from_torch`` says what to install."""
import subprocess
import sys

import pytest

import loopweave as lw


def test_importing_loopweave_does_not_import_torch():
    code = "import sys, loopweave; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_from_torch_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)       # an import of torch now fails
    with pytest.raises(lw.MissingExtraError, match=r"from_torch needs the optional package 'torch'.*loopweave\[torch\]"):
        lw.from_torch(object(), ())

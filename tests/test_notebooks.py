"""Run every notebook in notebooks/ top to bottom, so they never rot.

Each notebook runs in a fresh Jupyter kernel ("python3" resolves to the interpreter
running pytest once ipykernel is installed in it); any cell that raises fails the test
with the cell's source and traceback.  The kernel sees ``LOOPWEAVE_NOTEBOOK_TEST=1``: the notebooks
that time loopweave against a peer then take one pair of samples without pauses (they check that
the comparison runs, not what it measures).  Needs the ``notebook`` extra:
``pip install -e ".[test,notebook]"``; without it the tests skip.
"""
from __future__ import annotations

import os
import pathlib
import sys

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300
#: notebooks of the torch front end: they run where the ``torch`` extra is installed
NEEDS_TORCH = {"06_pytorch.ipynb"}

pytestmark = pytest.mark.notebook


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    if path.name in NEEDS_TORCH:
        pytest.importorskip("torch")
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(str(path), as_version=4)
    saved = {name: os.environ.get(name) for name in ("MPLBACKEND", "LOOPWEAVE_NOTEBOOK_TEST")}
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ["LOOPWEAVE_NOTEBOOK_TEST"] = "1"
    try:
        client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        except CellExecutionError as err:
            pytest.fail(f"{path.name}: a cell failed\n{err}", pytrace=False)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs: {errors}"


def test_kernel_is_this_interpreter(tmp_path):
    """The "python3" kernel the notebooks run in is the one pytest runs in (the venv's)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import sys, loopweave\nprint(sys.prefix)")])
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    printed = nb.cells[0].outputs[0]["text"].strip()
    assert os.path.realpath(printed) == os.path.realpath(sys.prefix)


def test_notebooks_are_committed_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    assert NOTEBOOKS, "notebooks/ has no notebooks"
    for path in NOTEBOOKS:
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, \
                    f"{path.name}: clear the outputs before committing (jupyter nbconvert --clear-output)"

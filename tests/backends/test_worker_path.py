"""Worker processes and library look-ups never take code from the current folder: a ``numpy.py``
or a ``libnvrtc.so`` in the folder loopweave runs in (an unpacked model's, say) is not loaded."""
import os
import shutil
import subprocess
import sys

import pytest

from loopweave.autoschedule.measure import LocalMeasurer
from loopweave.backends import build_workers
from loopweave.backends.cuda import compiler
from loopweave.errors import BuildError
from loopweave.nn_ops.testing.fuzz import FuzzWorker

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


@pytest.fixture
def hostile_folder(tmp_path, monkeypatch):
    """A current folder whose numpy.py leaves a mark when imported (and then fails)."""
    folder = tmp_path / "model"
    folder.mkdir()
    mark = tmp_path / "numpy-ran"
    (folder / "numpy.py").write_text(f"open({str(mark)!r}, 'w').write('ran')\nraise SystemExit(3)\n")
    monkeypatch.chdir(folder)
    return mark


def _started_and_done(proc) -> int:
    """Close the worker's input once it has imported what it imports at start; its exit status."""
    proc.stdin.close()
    return proc.wait(timeout=120)


def test_build_worker_does_not_import_from_the_current_folder(hostile_folder):
    worker = build_workers._Worker()
    assert _started_and_done(worker.proc) == 0
    assert not hostile_folder.exists()


def test_measure_worker_does_not_import_from_the_current_folder(hostile_folder):
    measurer = LocalMeasurer()
    assert _started_and_done(measurer._start()) == 0
    assert not hostile_folder.exists()


def test_fuzz_worker_does_not_import_from_the_current_folder(hostile_folder):
    worker = FuzzWorker()
    worker._start()
    assert _started_and_done(worker.proc) == 0
    assert not hostile_folder.exists()


@pytest.mark.skipif(CC is None, reason="no C compiler (cc) to build a library")
def test_nvrtc_is_never_looked_up_in_the_current_folder(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    libdir = folder / "nvidia" / "cuda_nvrtc" / "lib"
    libdir.mkdir(parents=True)
    mark = tmp_path / "nvrtc-ran"
    src = tmp_path / "fake.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void f(void) '
                   f'{{ FILE *m = fopen("{mark}", "w"); if (m) fclose(m); }}\n')
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(libdir / "libnvrtc.so.99"), str(src)], check=True)
    (folder / "bin").mkdir()
    (folder / "bin" / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    (folder / "bin" / "nvcc").chmod(0o755)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", ["", ".", *sys.path])
    monkeypatch.setenv("PATH", os.pathsep.join(["", "bin", os.environ.get("PATH", "")]))
    monkeypatch.setenv("CUDA_HOME", ".")
    found = compiler.find_nvrtc.__wrapped__()
    assert found is None or os.path.isabs(found) and not found.startswith(str(folder)), found
    assert not mark.exists()
    nvcc = compiler.find_nvcc.__wrapped__()
    assert nvcc is None or not os.path.realpath(nvcc).startswith(str(folder)), nvcc


def test_the_python_3_10_command_drops_the_current_folder_too(hostile_folder, monkeypatch):
    """Without -P (Python 3.10), ``-c`` deletes the entry it prepended before importing anything."""
    from loopweave.backends import python_command
    monkeypatch.setattr(python_command.sys, "version_info", (3, 10, 13))
    command = python_command.python_module_command("loopweave.autoschedule.worker")
    assert "-P" not in command
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert _started_and_done(proc) == 0
    assert not hostile_folder.exists()
    code = python_command.python_code_command("import sys, numpy; print(sys.path[0] != '', numpy.__file__)")
    out = subprocess.run(code, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True" and not hostile_folder.exists() and str(hostile_folder.parent) not in out[1]


def test_the_c_compiler_is_never_looked_up_in_the_current_folder(tmp_path, monkeypatch):
    """A ``cc`` (or gcc, clang) planted in an unpacked model's folder, reached through an empty or
    relative PATH entry, is not the compiler export_library runs."""
    from loopweave.backends.export import find_c_compiler
    folder = tmp_path / "model"
    (folder / "bin").mkdir(parents=True)
    for name in ("cc", "gcc", "clang"):
        for where in (folder, folder / "bin"):
            (where / name).write_text("#!/bin/sh\nexit 0\n")
            (where / name).chmod(0o755)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", os.pathsep.join(["", ".", "bin", os.environ.get("PATH", "")]))
    try:
        found = find_c_compiler()[0]
    except BuildError:
        return                                    # no compiler elsewhere: none is found, not the planted one
    assert os.path.isabs(found) and not os.path.realpath(found).startswith(str(folder)), found

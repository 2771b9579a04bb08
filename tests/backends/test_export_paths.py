"""export_library with a relative output path, and the library's SONAME: a program linked with
``cc app.c ./k.so -Wl,-rpath,'$ORIGIN'`` runs from any working directory."""
import os
import shutil
import subprocess

import pytest

import loopweave as lw
from loopweave.kernels import design_matmul_schedule

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None or shutil.which("readelf") is None,
                                reason="needs a C compiler (cc) and readelf (binutils)")

APP_C = r"""
#include <stdio.h>
#include "k.h"
int main(void) { printf("%d\n", k_set_num_threads(1)); return 0; }
"""


def _dynamic_section(path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout


def test_relative_output_path_lands_in_the_working_directory(tmp_path, monkeypatch):
    s, args = design_matmul_schedule()
    f = lw.build(s, args, name="matmul")
    monkeypatch.chdir(tmp_path)
    lib = f.export_library("k.so", prefix="k_")
    assert (tmp_path / "k.so").is_file() and (tmp_path / "k.h").is_file()
    assert not (tmp_path / "k.so.partial").exists()
    assert (tmp_path / lib).resolve() == (tmp_path / "k.so").resolve()


def test_library_has_its_file_name_as_soname_and_runs_through_origin_rpath(tmp_path, monkeypatch):
    s, args = design_matmul_schedule()
    f = lw.build(s, args, name="matmul")
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    monkeypatch.chdir(deploy)
    f.export_library("k.so", prefix="k_")
    assert "Library soname: [k.so]" in _dynamic_section(deploy / "k.so")
    (deploy / "app.c").write_text(APP_C)
    subprocess.run([CC, "-O2", "app.c", "./k.so", "-Wl,-rpath,$ORIGIN", "-o", "app"], check=True, cwd=deploy)
    app_dynamic = _dynamic_section(deploy / "app")
    assert "Shared library: [k.so]" in app_dynamic and "./k.so" not in app_dynamic
    # run from another folder: found through $ORIGIN, not the working directory
    proc = subprocess.run([str(deploy / "app")], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"

"""Names from a model reach an exported library's C only escaped: a model whose value, node and graph
names hold comment terminators, preprocessor lines, quotes, backslashes and non-ASCII text exports
to a header that compiles, a library that defines only the API's symbols and runs nothing when loaded,
and C tables that give the names back exactly."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.backends.c_text import c_comment, c_identifier, c_include_name, c_string
from loopweave.errors import ArgumentError

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) to link and call the library")

API = ("model_create", "model_num_inputs", "model_num_outputs", "model_input_name", "model_output_name",
       "model_input_dtype", "model_output_dtype", "model_input_shape", "model_output_shape", "model_run",
       "model_destroy", "model_target", "last_error")

# each one ends a comment of the header and would put code into the library and every program
INJECT = 'x */ __attribute__((constructor)) static void lw_injected(void) { __builtin_printf("INJECTED\\n"); } /*'
HOSTILE = [
    INJECT,
    'y */\n#define LW_HOSTILE_MACRO 1\n/*',
    'q"uote\\" back\\\\slash ??/ trigraph',
    "naïve → ✓ \u2028 line separator",
    "end with star *",
    "/ starts with slash",
]


def _hostile_model():
    x, out1, out2 = HOSTILE[0], HOSTILE[1], HOSTILE[2]
    mid, bias = HOSTILE[3], HOSTILE[4]
    nodes = [helper.make_node("Relu", [x], [mid], name=HOSTILE[5], doc_string=INJECT),
             helper.make_node("Add", [mid, bias], [out1], name=INJECT),
             helper.make_node("Neg", [x], [out2], name="*/ #include <stdio.h> /*")]
    graph = helper.make_graph(
        nodes, INJECT,
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(out1, TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info(out2, TensorProto.FLOAT, [2, 3])],
        initializer=[helper.make_tensor(bias, TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])],
        doc_string=INJECT)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], doc_string=INJECT)
    model.ir_version = 8
    return model


# loads the library and prints each input's and output's name as hex (nothing else may print)
LOADER = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.lw_model_input_name.restype = lib.lw_model_output_name.restype = ctypes.c_char_p
m = ctypes.c_void_p()
assert lib.lw_model_create(ctypes.byref(m), 1) == 0
for i in range(lib.lw_model_num_inputs(m)):
    print("in", lib.lw_model_input_name(m, i).hex())
for i in range(lib.lw_model_num_outputs(m)):
    print("out", lib.lw_model_output_name(m, i).hex())
lib.lw_model_destroy(m)
"""


@needs_cc
@pytest.mark.parametrize("params", ["embed", "side"])
def test_hostile_names_stay_text(tmp_path, params, monkeypatch):
    from loopweave.nn_ops.network import export
    monkeypatch.setattr(export, "target_description", lambda target: INJECT)    # a CPU name is text too
    exe = lw.compile(lw.from_onnx(_hostile_model()), progress=False)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    got = exe.run({HOSTILE[0]: x})
    np.testing.assert_array_equal(got[0], np.maximum(x, 0) + [1, 2, 3])
    lib = exe.export_library(tmp_path / "model.so", params=params)
    header = tmp_path / "model.h"
    text = header.read_text()
    assert text.isascii() and "INJECTED" in text     # the names are there, as comment text

    # the header alone compiles, as C and as C++, without a warning (a '/*' inside a comment is one)
    for lang in ("c", "c++"):
        proc = subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-x", lang, str(header)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    # its comments hold all the hostile text: preprocessed, nothing of it is left
    pre = subprocess.run([CC, "-E", "-P", "-x", "c", str(header)], capture_output=True, text=True, check=True)
    assert "lw_injected" not in pre.stdout
    macros = subprocess.run([CC, "-E", "-dM", "-x", "c", str(header)], capture_output=True, text=True, check=True)
    assert "LW_HOSTILE_MACRO" not in macros.stdout

    nm = shutil.which("nm")
    if nm is not None:
        out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout
        assert sorted(line.split()[-1] for line in out.splitlines()) == sorted("lw_" + n for n in API)
        every = subprocess.run([nm, str(lib)], capture_output=True, text=True, check=True).stdout
        assert "lw_injected" not in every

    # loading the library runs nothing of the model's text; its tables give the names back exactly
    proc = subprocess.run([sys.executable, "-c", LOADER, str(lib)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n") == [
        f"in {HOSTILE[0].encode().hex()}", f"out {HOSTILE[1].encode().hex()}", f"out {HOSTILE[2].encode().hex()}",
        ""]


@needs_cc
def test_library_file_name_that_cannot_be_included_is_refused(tmp_path):
    exe = lw.compile(lw.from_onnx(_hostile_model()), progress=False)
    for name in ('a"b.so', "a\\b.so", "a\nb.so"):
        with pytest.raises(ArgumentError, match="cannot be written in an #include line"):
            exe.export_library(tmp_path / name)
        assert not (tmp_path / name).exists()


def test_comment_text_cannot_end_or_open_a_comment():
    for text in [*HOSTILE, "*/", "/*", "**//", "/*/", "*/*/", "\\", "\x00\x7f\n\r\t", "\U0001F600"]:
        body = c_comment(text)
        assert body.isascii() and body.isprintable(), body
        for before in ("", "*", "/"):       # safe beside any text
            for after in ("", "*", "/"):
                assert "*/" not in before + body + after and "/*" not in before + body + after, body


def test_string_literal_and_identifier_and_include_name():
    assert c_string('a"b\\c?\n') == '"a\\"b\\\\c\\?\\012"'
    assert c_string("é") == '"\\303\\251"'
    assert c_identifier("lw_run_0ab", "the symbol") == "lw_run_0ab"
    for bad in ("9x", "a b", "é", "a;b", "", None):
        with pytest.raises(ArgumentError, match="the symbol must be a C identifier"):
            c_identifier(bad, "the symbol")
    assert c_include_name("model v2.h", "export") == "model v2.h"
    with pytest.raises(ArgumentError, match="cannot be written in an #include line"):
        c_include_name('m".h', "export")


@needs_cc
def test_hostile_cpu_name_in_a_kernel_header(tmp_path, monkeypatch):
    """A CPU name (from a target string or a .lwx) is comment text too; so is a kernel's name."""
    from loopweave.backends import kernel_export
    monkeypatch.setattr(kernel_export, "target_description", lambda target: INJECT)
    A = lw.placeholder((4,), name="A")
    B = lw.compute((4,), lambda i: A[i] * 2.0, name="B")
    f = lw.build(lw.create_schedule(B), [A, B], name="double_it")
    lib = f.export_library(tmp_path / "k.so")
    header = tmp_path / "k.h"
    proc = subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", "-x", "c", str(header)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    pre = subprocess.run([CC, "-E", "-P", "-x", "c", str(header)], capture_output=True, text=True, check=True)
    assert "lw_injected" not in pre.stdout
    proc = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(lib)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr

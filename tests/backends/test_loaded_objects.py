"""backends/loaded_objects.py: each symbol's object code is loaded once per process."""
import ctypes

from loopweave.backends import loaded_objects
from loopweave.backends.llvm import jit
from loopweave.target import resolve_target

_ADD_ONE = """
define i64 @{name}(i64 %x) {{
  %y = add i64 %x, {k}
  ret i64 %y
}}
"""
_CALLER = """
declare i64 @{callee}(i64)
define i64 @{name}(i64 %x) {{
  %y = call i64 @{callee}(i64 %x)
  %z = mul i64 %y, 2
  ret i64 %z
}}
"""
_FN = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)


def test_a_symbol_loads_once_and_keeps_its_first_object():
    host = resolve_target("llvm")
    first, _ = jit.compile_ir(_ADD_ONE.format(name="lw_test_loaded_once", k=1), host)
    other, _ = jit.compile_ir(_ADD_ONE.format(name="lw_test_loaded_once", k=2), host)
    assert loaded_objects.loaded_object("lw_test_loaded_once") is None
    address = loaded_objects.load("lw_test_loaded_once", first)
    assert loaded_objects.load("lw_test_loaded_once", other) == address      # not loaded a second time
    assert loaded_objects.loaded_object("lw_test_loaded_once") == first
    assert _FN(address)(41) == 42


def test_an_object_links_against_the_addresses_it_imports():
    host = resolve_target("llvm")
    callee, _ = jit.compile_ir(_ADD_ONE.format(name="lw_test_import_callee", k=1), host)
    caller, _ = jit.compile_ir(_CALLER.format(name="lw_test_import_caller", callee="lw_test_import_callee"), host)
    callee_address = loaded_objects.load("lw_test_import_callee", callee)
    address = loaded_objects.load("lw_test_import_caller", caller, {"lw_test_import_callee": callee_address})
    assert _FN(address)(4) == 10

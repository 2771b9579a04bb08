"""Fixtures shared by the network compilers' tests."""
import pytest


@pytest.fixture
def forbid_compilation(monkeypatch):
    """From here on, any lowering, LLVM work or object loading fails the test: for checks that a
    load or a run compiles nothing."""
    import loopweave.backends.build as build_module
    from loopweave.backends.llvm import jit

    def forbidden(*args, **kwargs):
        raise AssertionError("compilation where none may happen")
    for module, name in ((build_module, "build"), (build_module, "lower"), (build_module, "build_llvm"),
                         (jit, "compile_ir"), (jit, "load_object")):
        monkeypatch.setattr(module, name, forbidden)

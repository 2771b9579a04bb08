"""backends/llvm/runner.py: a static network's runner, made from plain call descriptions."""
from loopweave.backends.llvm.runner import network_runner, runner_ir
from loopweave.target import resolve_target

CALLS = [("lw_k_a", [("input", 0), ("arena", 128)]), ("lw_k_b", [("arena", 128), ("weight", 64), ("output", 0)]),
         ("lw_k_a", [("arena", 128), ("output", 1)])]


def test_each_kernel_is_declared_once_and_every_call_checks_the_error_slot():
    text = runner_ir(CALLS, "lw_run_test")
    assert 'define void @"lw_run_test"' in text
    assert text.count('declare void @"lw_k_a"') == 1 and text.count('declare void @"lw_k_b"') == 1
    assert text.count('call void @"lw_k_') == 3
    assert text.count("store i64 2, ") == 1           # the third call's position, written when it fails


def test_the_runner_is_named_by_its_content_and_a_saved_one_keeps_its_name():
    host = resolve_target("llvm")
    runner = network_runner(CALLS, ["lw_k_a", "lw_k_b"], host)
    assert runner.symbol.startswith("lw_run_") and f'@"{runner.symbol}"' in runner.llvm_ir
    assert network_runner(CALLS, ["lw_k_a", "lw_k_b"], host).symbol == runner.symbol
    assert network_runner(CALLS[:2], ["lw_k_a", "lw_k_b"], host).symbol != runner.symbol
    saved = network_runner(CALLS, [], host, symbol="lw_run_saved", object_code=runner.object_code)
    assert saved.object_code is runner.object_code and saved.llvm_ir == runner.llvm_ir.replace(
        runner.symbol, "lw_run_saved")


def test_the_runner_is_compiled_without_llvm_s_ir_passes(monkeypatch):
    """Its straight-line calls of kernels compiled elsewhere gain nothing from them, and they cost more
    than its code generation, once per network compiled."""
    from loopweave.backends.llvm import jit
    real, flags = jit.compile_ir, []

    def recording(text, target, optimized=True):
        flags.append(optimized)
        return real(text, target, optimized=optimized)
    monkeypatch.setattr(jit, "compile_ir", recording)
    monkeypatch.setattr(jit, "cached_object", lambda symbol, target: None)
    runner = network_runner(CALLS, ["lw_k_a", "lw_k_b"], resolve_target("llvm"))
    assert flags == [False] and runner.object_code

"""jobs.shared_state: inside the bench child the baselines and the reference run under PyTorch's state as it was
before the candidate's code ran, and the candidate under the state it made. The switch runs here on the CPU; every
test puts the process's state back as it found it."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.jobs import recorder
from mcp_server.engine.jobs import shared_state as ss


@pytest.fixture
def pristine():
    before = ss.capture()
    yield before
    ss.apply(before, full=True)


def _slow_add(self, other):
    return torch.sub(self, -other)


def test_the_baselines_get_the_state_from_before_the_candidate_and_the_candidate_gets_its_own(pristine):
    switch = ss.Switch()
    switch.to("candidate")
    # What a candidate could do to the baselines: switch a backend off, another precision, replace functions
    # (one through a computed name, which the static scan cannot read; one a method added to Tensor, which
    # shadows the one it inherits).
    torch.backends.cudnn.enabled = False
    torch.backends.cuda.enable_flash_sdp(False)
    torch.set_default_dtype(torch.float64)
    getattr(torch, "Ten" + "sor").__add__ = _slow_add
    torch.nn.functional.gelu = torch.nn.functional.relu
    switch.to("reference")
    assert torch.backends.cudnn.enabled and torch.backends.cuda.flash_sdp_enabled()
    assert torch.get_default_dtype() == torch.float32
    assert (
        "__add__" not in vars(torch.Tensor)
        and torch.nn.functional.gelu is pristine.functions[("torch.nn.functional", "gelu")][1]
    )
    assert {
        "torch.backends.cudnn.enabled",
        "torch.backends.cuda.flash_sdp",
        "torch.default_dtype",
        "torch.Tensor.__add__ (replaced)",
        "torch.nn.functional.gelu (replaced)",
    } <= switch.changed["candidate"]
    switch.to("candidate")  # the candidate's calls see what it set
    assert not torch.backends.cudnn.enabled and torch.get_default_dtype() == torch.float64
    assert vars(torch.Tensor)["__add__"] is _slow_add and torch.nn.functional.gelu is torch.nn.functional.relu
    switch.to("reference")
    assert torch.backends.cudnn.enabled and "__add__" not in vars(torch.Tensor)


def test_changes_made_while_the_reference_runs_are_kept_for_both(pristine):
    # torch changes its own state too (dynamo wraps torch.manual_seed when it loads): not the candidate's doing.
    switch = ss.Switch()
    switch.to("candidate")
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    switch.to("reference")
    wrapped = lambda *a, **k: pristine.functions[("torch", "manual_seed")][1](*a, **k)
    torch.manual_seed = wrapped
    switch.to("candidate")
    assert torch.manual_seed is wrapped
    assert torch.backends.cudnn.benchmark is not pristine.settings["torch.backends.cudnn.benchmark"]
    switch.to("reference")
    assert torch.manual_seed is wrapped and "torch.manual_seed (replaced)" not in switch.changed["candidate"]
    assert torch.backends.cudnn.benchmark is pristine.settings["torch.backends.cudnn.benchmark"]


def test_config_entries_of_dynamo_are_put_back(pristine):
    import torch._dynamo.config as dynamo_config

    switch = ss.Switch()
    before = dynamo_config.cache_size_limit
    switch.to("candidate")
    dynamo_config.cache_size_limit = 1  # every recompile of the compile baseline would fall back to eager
    switch.to("reference")
    assert dynamo_config.cache_size_limit == before
    # Newer builds keep it as recompile_limit, of which cache_size_limit is an alias.
    assert switch.changed["candidate"] & {
        "torch._dynamo.config.cache_size_limit",
        "torch._dynamo.config.recompile_limit",
    }
    switch.to("candidate")
    assert dynamo_config.cache_size_limit == 1
    switch.to("reference")


def test_a_candidate_that_changes_nothing_is_reported_as_changing_nothing(pristine):
    switch = ss.Switch()
    for _ in range(3):
        switch.to("candidate")
        torch.ones(4) + torch.ones(4)
        switch.to("reference")
    assert not any(switch.changed.values())
    assert ss.delta(pristine, ss.capture()).names() == []


def test_a_class_that_appears_later_keeps_its_methods(pristine):
    # A lazily imported class is new to the state: putting the state back must not strip it.
    switch = ss.Switch()
    switch.to("candidate")
    torch.nn.LaterModule = type("LaterModule", (torch.nn.Module,), {"forward": lambda self, x: x})
    try:
        switch.to("reference")
        assert "forward" in vars(torch.nn.LaterModule)
    finally:
        del torch.nn.LaterModule


def test_each_provider_runs_under_its_own_state(pristine):
    switch = ss.Switch(candidates={"candidate", "stage1"})
    switch.run_as("stage1")
    assert switch.current == "stage1"
    torch.backends.cudnn.enabled = False  # stage 1's own choice, for its own calls
    for baseline in ("eager", "compile", "liger"):
        switch.run_as(baseline)
        assert switch.current == "reference" and torch.backends.cudnn.enabled
    switch.run_as("candidate")
    assert torch.backends.cudnn.enabled  # not the candidate's
    switch.run_as("stage1")
    assert not torch.backends.cudnn.enabled
    assert recorder._owner == "stage1"  # threads started now are stage 1's (jobs.recorder.interference)
    switch.to("reference")
    assert recorder._owner == "reference"
    assert {k: v for k, v in switch.changed.items() if v} == {"stage1": {"torch.backends.cudnn.enabled"}}


def _sleepy_empty_like(*args, **kwargs):
    return pristine_empty_like(*args, **kwargs)


pristine_empty_like = torch.empty_like


def test_what_the_candidate_replaces_does_not_reach_the_stage1_attempt_timed_beside_it(pristine):
    # Must fail without per-provider states: a later stage replaces (through a computed name) a torch function the
    # stage-1 attempt calls and it does not, slowing stage 1 in the same rounds to buy a gain.
    switch = ss.Switch(candidates={"candidate", "stage1"})
    switch.run_as("candidate")
    setattr(torch, "empty" + "_like", _sleepy_empty_like)
    torch.backends.cuda.matmul.allow_tf32 = not torch.backends.cuda.matmul.allow_tf32
    for _ in range(2):  # every round, whichever provider came before
        switch.run_as("stage1")
        assert torch.empty_like is pristine_empty_like
        assert torch.backends.cuda.matmul.allow_tf32 is pristine.settings["torch.backends.cuda.matmul.allow_tf32"]
        switch.run_as("eager")
        assert torch.empty_like is pristine_empty_like
        # Twin: the candidate's own calls still run under what it set.
        switch.run_as("candidate")
        assert torch.empty_like is _sleepy_empty_like
        assert torch.backends.cuda.matmul.allow_tf32 is not pristine.settings["torch.backends.cuda.matmul.allow_tf32"]
    switch.to("reference")
    assert "torch.empty_like (replaced)" in switch.changed["candidate"] and not switch.changed.get("stage1")


class _SlowMode(torch.overrides.TorchFunctionMode):
    """What a candidate could leave pushed at import: it sees every torch call of the baselines after it."""

    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        _SlowMode.calls += 1
        return func(*args, **(kwargs or {}))


def test_modes_autocast_anomaly_mode_and_global_module_hooks_left_by_the_candidate_are_its_own(pristine):
    switch = ss.Switch()
    switch.to("candidate")
    mode = _SlowMode()
    mode.__enter__()  # left pushed, as at import
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.float16)  # bfloat16 is the default
    torch.set_anomaly_enabled(True)
    hook = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        switch.to("reference")
        _SlowMode.calls = 0
        linear = torch.nn.Linear(4, 4)
        out = linear(torch.randn(2, 4))
        assert _SlowMode.calls == 0 and out.dtype == torch.float32  # no mode, no autocast, no hook
        assert not torch.is_anomaly_enabled() and not torch.nn.modules.module._global_forward_hooks
        assert {
            "torch.function_mode_stack",
            "torch.autocast.cpu.enabled",
            "torch.autocast.cpu.dtype",
            "torch.autograd.anomaly_mode",
            "torch.nn.modules.module._global_forward_hooks",
        } <= switch.changed["candidate"]
        switch.to("candidate")  # the candidate's own calls run under what it set
        assert torch.overrides._get_current_function_mode() is mode and torch.is_autocast_enabled("cpu")
        assert torch.nn.modules.module._global_forward_hooks
        switch.to("reference")
    finally:
        hook.remove()
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()


def test_a_mode_the_candidate_enters_and_leaves_changes_nothing(pristine):
    switch = ss.Switch()
    switch.to("candidate")
    with _SlowMode(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.ones(2) + 1
    switch.to("reference")
    assert not any(switch.changed.values())


def _slow_launch_hook(*args, **kwargs):
    return None


def test_tritons_knobs_launch_hooks_environment_and_language_set_by_the_candidate_are_its_own(pristine):
    # What would slow the stage-1 attempt's kernels instead of torch's: how they compile (ptxas options, IEEE
    # float32 dots, tl.exp resolved to something slower) and what runs at each launch.
    import os

    import triton
    import triton.language as tl
    from triton.backends.nvidia.compiler import CUDABackend

    exp, make_cubin = tl.exp, CUDABackend.make_cubin
    switch = ss.Switch(candidates={"candidate", "stage1"})
    switch.run_as("candidate")
    setattr(CUDABackend, "make_" + "cubin", lambda *args, **kwargs: None)  # ptxas at -O0, say
    triton.knobs.nvidia.ptxas_options = "-O0"
    triton.knobs.runtime.debug = True
    triton.knobs.runtime.launch_enter_hook.add(_slow_launch_hook)
    os.environ["TRITON_F32_DEFAULT"] = "ieee"
    setattr(tl, "e" + "xp", tl.log)
    try:
        switch.run_as("stage1")
        assert "ptxas_options" not in vars(triton.knobs.nvidia) and not triton.knobs.runtime.debug
        assert _slow_launch_hook not in triton.knobs.runtime.launch_enter_hook.calls
        assert "TRITON_F32_DEFAULT" not in os.environ and tl.exp is exp and CUDABackend.make_cubin is make_cubin
        switch.run_as("candidate")  # twin: the candidate's kernels compile and launch as it set
        assert triton.knobs.nvidia.ptxas_options == "-O0" and triton.knobs.runtime.debug
        assert _slow_launch_hook in triton.knobs.runtime.launch_enter_hook.calls
        assert os.environ["TRITON_F32_DEFAULT"] == "ieee" and tl.exp is tl.log
        assert CUDABackend.make_cubin is not make_cubin
        switch.to("reference")
        assert {
            "triton.knobs.nvidia",
            "triton.knobs.runtime",
            "triton.knobs.runtime.launch_enter_hook",
            "triton.environment",
            "triton.language.exp (replaced)",
            "triton.backends.nvidia.compiler.CUDABackend.make_cubin (replaced)",
        } <= switch.changed["candidate"]
    finally:
        switch.to("reference")
        os.environ.pop("TRITON_F32_DEFAULT", None)
        triton.knobs.runtime.launch_enter_hook.remove(_slow_launch_hook)
        vars(triton.knobs.nvidia).pop("ptxas_options", None)
        vars(triton.knobs.runtime).pop("debug", None)
        tl.exp = exp
        CUDABackend.make_cubin = make_cubin


def test_a_library_for_torchs_own_ops_made_by_submitted_code_stops_the_bench_at_the_handback(pristine):
    # Must fail: the candidate's code makes an "aten" library (a fallthrough for the Python key). Twin: a library in
    # a namespace of its own hands the process back as usual.
    from mcp_server.engine.runner.child import Refused

    recorder.install_launch_hooks()
    before = len(recorder.registrations())
    switch = ss.Switch(candidates={"candidate"})
    switch.to("candidate")
    own = torch.library.Library("ptt_switch_twin", "FRAGMENT")
    switch.to("reference")
    switch.to("candidate")
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("mul.Tensor", torch.library.fallthrough_kernel, "Python")
        with pytest.raises(Refused) as refused:
            switch.to("reference")
        assert refused.value.kind.value == "evasion" and "'aten'" in str(refused.value)
    finally:
        lib._destroy()
        own._destroy()
        del recorder._replaced[before:]

"""PyTorch and Triton state that the candidate shares with the baselines and the reference inside the bench child.

The candidate runs in the process that also times the eager and torch.compile baselines (and any peer) and runs
the reference for the checks of timed outputs. Through PyTorch's global settings (cuDNN off, SDPA's fast backends
disabled, another float32 matmul precision, BLAS library or default dtype, autocast, anomaly mode, dynamo's or
inductor's config), a torch-function or dispatch mode left pushed, nn.Module's global hooks, or by replacing a torch
function (``torch.nn.functional.scaled_dot_product_attention``, ``torch.nn.Conv2d.forward``, ``torch.Tensor.__add__``)
it could slow every baseline down, or change what the reference computes. Through Triton's knobs, launch hooks,
``TRITON_*`` environment or a replaced ``triton.language`` function it could slow another provider's Triton kernels
(a stage-1 attempt timed beside it). The static scan flags the plain ways of doing so; a computed attribute name or
a call that flips a backend is not plain.

So bench keeps a state per side: the reference's, as it was before any submitted code ran, and each submitted
provider's (the candidate's, an extra candidate's), as that provider's code last left it. Baselines and reference
calls run under the first, each submitted provider's calls under its own, and whatever each changed is reported. A
switch costs a few milliseconds (some 4000 attribute lookups, twice), once per provider and round.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from mcp_server.engine.jobs import integrity, recorder
from mcp_server.engine.models import FindingKind

_MISSING = object()


def _flag(owner: Any, name: str) -> tuple[Any, Any]:
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _deterministic() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _settings() -> dict[str, tuple[Any, Any]]:
    """name → (get, set) for the global switches of PyTorch that change what or how fast a torch op computes."""
    cuda, cudnn = torch.backends.cuda, torch.backends.cudnn
    # In the order they are put back: the precision that sets every backend's first, then each backend's own
    # (newer builds), then the older flags (a build that has both raises when they are read mixed).
    out: dict[str, tuple[Any, Any]] = {
        "torch.float32_matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision)
    }
    for name in ("backends", "backends.cuda.matmul", "backends.cudnn", "backends.cudnn.conv", "backends.cudnn.rnn"):
        owner: Any = torch
        for part in name.split("."):
            owner = getattr(owner, part, None)
        if owner is not None and hasattr(owner, "fp32_precision"):
            out[f"torch.{name}.fp32_precision"] = _flag(owner, "fp32_precision")
    out |= {
        f"torch.backends.cudnn.{flag}": _flag(cudnn, flag)
        for flag in ("enabled", "benchmark", "deterministic", "allow_tf32")
    }
    out |= {
        f"torch.backends.cuda.matmul.{flag}": _flag(cuda.matmul, flag)
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
        if hasattr(cuda.matmul, flag)
    }
    out["torch.default_dtype"] = (torch.get_default_dtype, torch.set_default_dtype)
    out["torch.deterministic_algorithms"] = (
        _deterministic,
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
    )
    out["torch.grad_enabled"] = (torch.is_grad_enabled, torch.set_grad_enabled)
    for backend in ("flash", "mem_efficient", "math", "cudnn"):
        get, put = getattr(cuda, f"{backend}_sdp_enabled", None), getattr(cuda, f"enable_{backend}_sdp", None)
        if get is not None and put is not None:
            out[f"torch.backends.cuda.{backend}_sdp"] = (get, put)
    for library in ("blas", "linalg"):
        choose = getattr(cuda, f"preferred_{library}_library", None)
        if choose is not None:
            out[f"torch.backends.cuda.preferred_{library}_library"] = (choose, choose)
    # Autocast would run the baselines, and the reference the checks compare with, in another dtype; anomaly mode
    # and the sync debug mode slow every op down.
    for device in ("cuda", "cpu"):
        out[f"torch.autocast.{device}.enabled"] = (
            lambda d=device: torch.is_autocast_enabled(d),
            lambda v, d=device: torch.set_autocast_enabled(d, v),
        )
        out[f"torch.autocast.{device}.dtype"] = (
            lambda d=device: torch.get_autocast_dtype(d),
            lambda v, d=device: torch.set_autocast_dtype(d, v),
        )
    out["torch.autocast.cache"] = (torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled)
    out["torch.autograd.anomaly_mode"] = (
        lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        lambda v: torch.set_anomaly_enabled(v[0], v[1]),
    )
    if torch.cuda.is_available():
        out["torch.cuda.sync_debug_mode"] = (torch.cuda.get_sync_debug_mode, torch.cuda.set_sync_debug_mode)
    return out | _mode_stacks() | _global_module_hooks() | _triton_settings()


def _triton_settings() -> dict[str, tuple[Any, Any]]:
    """Triton's knobs, as set in each group (``triton.knobs.nvidia.ptxas_options``, ``knobs.runtime.debug``,
    ``knobs.language.fp32_default``), its launch hooks, and the environment variables the knobs read: what another
    provider's kernels compile and launch with in this process."""
    import os

    knobs = sys.modules.get("triton.knobs")
    if knobs is None:
        return {}
    out: dict[str, tuple[Any, Any]] = {}
    keys: set[str] = set()
    for name, group in sorted(vars(knobs).items()):
        if not isinstance(group, getattr(knobs, "base_knobs", ())):
            continue

        def put(values: dict[str, Any], group: Any = group) -> None:
            vars(group).clear()
            vars(group).update(values)

        out[f"triton.knobs.{name}"] = (lambda group=group: dict(vars(group)), put)
        keys |= {d.key for d in group.knob_descriptors.values() if isinstance(getattr(d, "key", None), str)}
        for attr, chain in vars(type(group)).items():
            if isinstance(chain, getattr(knobs, "HookChain", ())):
                out[f"triton.knobs.{name}.{attr}"] = (
                    lambda chain=chain: tuple(chain.calls),
                    lambda calls, chain=chain: chain.calls.__setitem__(slice(None), list(calls)),
                )

    def read() -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in os.environ.items() if k in keys or k.startswith("TRITON_")))

    def write(items: tuple[tuple[str, str], ...]) -> None:
        wanted = dict(items)
        for k in [k for k in os.environ if (k in keys or k.startswith("TRITON_")) and k not in wanted]:
            del os.environ[k]
        os.environ.update(wanted)

    out["triton.environment"] = (read, write)
    return out


def _stack(length: Any, at: Any, pop: Any, push: Any) -> tuple[Any, Any]:
    """(get, set) of a mode stack as a tuple, bottom first."""

    def get() -> tuple[Any, ...]:
        return tuple(at(i) for i in range(length()))

    def put(modes: tuple[Any, ...]) -> None:
        while length():
            pop()
        for mode in modes:
            push(mode)

    return get, put


def _mode_stacks() -> dict[str, tuple[Any, Any]]:
    """The torch-function and torch-dispatch mode stacks (a mode left pushed at import sees, and can slow, every op
    a baseline runs), and torch's flags that say whether a dispatch mode is on (read by dynamo and inductor)."""
    import torch.utils._python_dispatch as dispatch

    c = torch._C
    out = {
        "torch.function_mode_stack": _stack(
            c._len_torch_function_stack, c._get_function_stack_at, c._pop_torch_function_stack,
            c._push_on_torch_function_stack,
        ),
        "torch.dispatch_mode_stack": _stack(
            c._len_torch_dispatch_stack, c._get_dispatch_stack_at, lambda: c._pop_torch_dispatch_stack(None),
            c._push_on_torch_dispatch_stack,
        ),
    }  # fmt: skip
    for flag in ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode"):
        if hasattr(dispatch, flag):
            out[f"torch.utils._python_dispatch.{flag}"] = _flag(dispatch, flag)
    flag, sync = "_is_in_any_mode_without_ignore_compile_internals", "set_is_in_mode_without_ignore_compile_internals"
    if hasattr(dispatch, flag) and hasattr(dispatch, sync):

        def put(value: bool) -> None:
            setattr(dispatch, flag, value)
            getattr(dispatch, sync)(value)

        out[f"torch.utils._python_dispatch.{flag}"] = (lambda: getattr(dispatch, flag), put)
    return out


def _global_module_hooks() -> dict[str, tuple[Any, Any]]:
    """nn.Module's global hooks (``register_module_forward_hook`` and the like): every module call of a baseline
    would run them."""
    from torch.nn.modules import module

    out: dict[str, tuple[Any, Any]] = {}
    for name in sorted(vars(module)):
        hooks = getattr(module, name)
        if not name.startswith("_global"):
            continue
        if isinstance(hooks, dict):

            def get(hooks: dict = hooks) -> tuple[Any, ...]:
                return tuple(hooks.items())

            def put(items: tuple[Any, ...], hooks: dict = hooks) -> None:
                hooks.clear()
                hooks.update(items)

            out[f"torch.nn.modules.module.{name}"] = (get, put)
        elif hooks is None or isinstance(hooks, bool):
            out[f"torch.nn.modules.module.{name}"] = _flag(module, name)
    return out


def _config_modules() -> dict[str, Any]:
    """dynamo's and inductor's config modules, where they are already imported (importing them costs seconds)."""
    import sys

    names = ("torch._dynamo.config", "torch._inductor.config")
    return {name: sys.modules[name] for name in names if name in sys.modules}


def _namespaces() -> list[tuple[str, Any]]:
    """Where the torch functions a reference calls live: torch and its functional modules, Tensor's methods, and
    every nn.Module class's own methods."""
    import torch.nn.functional as F

    spaces: list[tuple[str, Any]] = [
        ("torch", torch),
        ("torch.nn.functional", F),
        ("torch.linalg", torch.linalg),
        ("torch.fft", torch.fft),
        ("torch.special", torch.special),
        ("torch.Tensor", torch.Tensor),
    ]
    for name in dir(torch.nn):
        cls = getattr(torch.nn, name, None)
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
            spaces.append((f"torch.nn.{name}", cls))
    return spaces + integrity.loaded_spaces(TRITON_SPACES)


# Where a Triton kernel's code and launch are made, beyond the launch classes the judge's own wrappers sit on
# (``integrity`` guards those): what ``tl.exp`` or ``tl.tensor.__add__`` resolve to when a kernel compiles, an
# autotuning config, the compiler's entry point and its CUDA passes (ptxas options), the compiled kernel's launch.
TRITON_SPACES = (
    ("triton", ()),
    ("triton.language", ()),
    ("triton.language.core", ("tensor",)),
    ("triton.language.math", ()),
    ("triton.language.standard", ()),
    ("triton.runtime.autotuner", ("Config",)),
    ("triton.compiler.compiler", ("CompiledKernel",)),
    ("triton.backends.nvidia.compiler", ("CUDABackend",)),
    ("triton.backends.nvidia.driver", ("CudaLauncher",)),
)


@dataclass
class State:
    """Settings, config entries and the functions of the watched namespaces; a delta holds only some of them."""

    settings: dict[str, Any] = field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    functions: integrity.Identities = field(default_factory=dict)

    def names(self) -> list[str]:
        out = list(self.settings)
        out += [f"{module}.{key}" for module, config in self.configs.items() for key in config]
        out += [f"{label}.{attr} (replaced)" for label, attr in self.functions]
        return out


def capture() -> State:
    settings = {}
    for name, (get, _) in _settings().items():
        try:
            settings[name] = get()
        except Exception:  # a switch this build lacks
            continue
    configs = {name: module.get_config_copy() for name, module in _config_modules().items()}
    functions = integrity.identities(_namespaces(), lambda label, attr, obj: integrity.is_code(obj))
    return State(settings, configs, functions)


def delta(before: State, after: State) -> State:
    """What ``after`` changed from ``before``: settings and config entries with other values, functions replaced,
    and methods added to a class (they shadow what it inherits, as ``torch.Tensor.__add__`` does ``TensorBase``'s)."""
    out = State()
    out.settings = {k: v for k, v in after.settings.items() if before.settings.get(k, _MISSING) != v}
    for module, config in after.configs.items():
        old = before.configs.get(module, {})
        changed = {k: v for k, v in config.items() if k in old and old[k] != v}
        if changed:
            out.configs[module] = changed
    for key, (space, obj) in after.functions.items():
        was = before.functions.get(key)
        if (was is not None and was[1] is not obj) or (was is None and isinstance(space, type)):
            out.functions[key] = (space, obj)
    return out


def apply(state: State, full: bool = False) -> None:
    """Set each setting, config entry and function ``state`` holds where it differs now. ``full`` (a captured
    state, not a delta): also remove what was added to a watched class since."""
    switches = _settings()
    for name, value in state.settings.items():
        get, put = switches[name]
        try:
            if get() != value:
                put(value)
        except Exception:
            continue
    for name, module in _config_modules().items():
        now = module.get_config_copy()
        for key, value in state.configs.get(name, {}).items():
            if key in now and now[key] != value:
                setattr(module, key, value)
    integrity.put_back(state.functions)
    if full:
        # Only in classes the state knows: a class that shows up later (a lazy import) keeps what it has.
        known = {label for label, _ in state.functions}
        for label, space in _namespaces():
            if isinstance(space, type) and label in known:
                for attr in [a for a in vars(space) if (label, a) not in state.functions]:
                    if callable(vars(space)[attr]):
                        delattr(space, attr)


@dataclass
class Switch:
    """Which state the process is in. ``to("reference")`` before a baseline or a reference call, ``to(name)`` before
    the code of ``name``, a provider whose code was submitted: the candidate, or an extra candidate timed beside it
    (a stage-1 attempt). ``run_as(provider)`` picks the one for any provider.

    Each submitted provider has a state of its own: the reference's with what that provider's code changed (a
    delta) applied over it. So the candidate's changes reach neither the baselines nor an extra candidate beside it
    (a later stage that slows the stage-1 attempt's ``torch.empty_like`` would otherwise buy itself a gain), and an
    extra candidate's reach neither the baselines nor the candidate. The reference's state is taken again each time
    a submitted provider gets the process (torch changes its own state too: dynamo wraps ``torch.manual_seed`` and
    ``nn.Module.__init__`` when it loads). ``changed`` names, per provider, everything its code changed."""

    # The providers whose code was submitted (the candidate, extra candidates); all others are baselines.
    candidates: set[str] = field(default_factory=set)
    changes: dict[str, State] = field(default_factory=dict)
    current: str = "reference"
    changed: dict[str, set[str]] = field(default_factory=dict)
    # Taken each time submitted code gets the process and looked at when it hands it back (jobs.integrity): the
    # judge's own code.
    guard: Any = None
    _reference: State | None = None
    _entered: State | None = None

    def __post_init__(self) -> None:
        recorder.own(self.current)
        recorder.follow_captures(self.current != "reference")

    def run_as(self, provider: str) -> None:
        """The state ``provider``'s code runs under: its own for a submitted provider, else the reference's."""
        self.to(provider if provider in self.candidates else "reference")

    def to(self, who: str) -> None:
        """Hand the process to ``who``: "reference", or a submitted provider's name. Between two submitted providers
        the process goes through the reference's state, so neither sees the other's changes."""
        if who == self.current:
            return
        if self.current != "reference":
            self._leave(self.current)
        if who != "reference":
            if self.guard is not None:
                self.guard.retake()
            self._reference = capture()
            apply(self.changes.get(who, State()))
            self._entered = capture()
        self.current = who
        recorder.own(who)
        # CUDA graphs are followed while submitted code runs (baselines' own graphs, a CUDA-graph peer's, are theirs).
        recorder.follow_captures(who != "reference")

    def _leave(self, who: str) -> None:
        """Keep what ``who``'s code changed as its own, and put the reference's state back."""
        assert self._reference is not None and self._entered is not None
        new = delta(self._entered, capture())
        self.changed.setdefault(who, set()).update(new.names())
        mine = self.changes.setdefault(who, State())
        mine.settings.update(new.settings)
        for module, config in new.configs.items():
            mine.configs.setdefault(module, {}).update(config)
        mine.functions.update(new.functions)
        apply(self._reference, full=True)
        if self.guard is not None:
            self.guard.check()
        self.current = "reference"
        recorder.own("reference")
        registered = recorder.registrations()
        if registered:
            # Kernels of torch's own ops run under every provider in the process (a fallthrough for the Python key
            # crashed torch.compile's baseline: fake tensors reached the CUDA kernel), so the bench stops here.
            from mcp_server.engine.runner.child import Refused

            raise Refused(
                FindingKind.evasion,
                f"{who}'s code put kernels in place of PyTorch's own ops ({'; '.join(registered[:3])}): they run "
                "below the count of the timed calls' torch work, and under every provider in the process; nothing "
                'is timed. Register custom ops in a namespace of your own (torch.library.custom_op("mylib::name"))',
            )

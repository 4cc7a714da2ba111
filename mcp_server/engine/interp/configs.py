"""Validate every config of an autotuned kernel, not only the one that ran.

Each autotune config is a different kernel: an autotuner on another GPU, or at another size, may pick any of
them. After a case ran (with the autotuner's pick on a GPU, config ``PTT_AUTOTUNE_CONFIG`` under the
interpreter), :func:`each_config` (in the candidate's child) runs it again once per config of each
autotuned kernel it launched that the kernel's own pruning keeps for those arguments (under the
interpreter, other than the one that ran), forcing that config, and keeps the outputs. :func:`judge_configs` (in the
trusted parent) compares them with the reference exactly like the main run's outputs and names the config of
every failure. ``PTT_VALIDATE_CONFIGS=0`` turns this off; ``PTT_VALIDATE_CONFIGS=N`` caps the extra runs per
case (default 32).
"""

from __future__ import annotations

import os
from typing import Any

# (Autotuner, args, kwargs) of the first launch of each autotuned kernel since the last reset, in order.
_launched: list[tuple[Any, tuple, dict[str, Any]]] = []
# Launch options that are not kernel arguments (kept out of what pruning sees, as the autotuner does).
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "grid", "warmup")
_tracking = False


def _track() -> None:
    global _tracking
    if _tracking:
        return
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(t is self for t, _, _ in _launched):
            _launched.append((self, args, dict(kwargs)))
        return original(self, *args, **kwargs)

    Autotuner.run = run
    _tracking = True


def start_case() -> None:
    """Call before a case's main run: start recording which autotuned kernels it launches."""
    _track()
    _launched.clear()


def _limit() -> int:
    try:
        return int(os.environ.get("PTT_VALIDATE_CONFIGS", "32"))
    except ValueError:
        return 32


def _kept(tuner: Any, args: tuple, kwargs: dict[str, Any]) -> set[int]:
    """ids of the configs the autotuner's own pruning keeps for this launch: the ones it may pick.

    A config pruned away (a one-block kernel's block narrower than the row, say) never runs at these
    arguments, so running it would fail a correct kernel."""
    configs = list(tuner.configs)
    tuned = {k for c in configs for k in c.kwargs}
    clean = {k: v for k, v in kwargs.items() if k not in tuned and k not in _LAUNCH_OPTIONS}
    saved = getattr(tuner, "nargs", None)
    try:
        tuner.nargs = dict(zip(tuner.arg_names, args, strict=False))
        kept = tuner.prune_configs(clean)
    except Exception:
        kept = configs
    finally:
        tuner.nargs = saved
    return {id(c) for c in kept}


def _name(tuner: Any) -> str:
    fn = getattr(tuner, "base_fn", None)
    return getattr(fn, "__name__", None) or type(tuner).__name__


def _describe(config: Any) -> str:
    parts = [f"{k}={v}" for k, v in getattr(config, "kwargs", {}).items()]
    for attr in ("num_warps", "num_stages"):
        if getattr(config, attr, None) is not None:
            parts.append(f"{attr}={getattr(config, attr)}")
    return ", ".join(parts)


def each_config(
    call: Any,
    inputs: list[Any],
    case: dict[str, Any],
    params: dict[str, Any],
    device: str,
    model_params: list[Any],
    ctx: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rerun the case once per config not yet run of every autotuned kernel it launched.

    Returns (meta, data): per variant, what ran and how it ended; and its outputs (CPU tensors)."""
    import torch

    from mcp_server.engine.jobs import common, grad_calls
    from mcp_server.engine.runner.child import classify_exception, is_sticky_cuda_error

    budget = _limit()
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    tuners = [(t, a, k) for t, a, k in _launched if len(getattr(t, "configs", []) or []) > 1]
    meta: list[dict[str, Any]] = []
    data: list[dict[str, Any]] = []
    if budget <= 0 or not tuners:
        return meta, data
    for tuner, launch_args, launch_kwargs in tuners:
        configs = list(tuner.configs)
        ran = getattr(tuner, "best_config", None)
        kept = _kept(tuner, launch_args, launch_kwargs)
        for index, config in enumerate(configs):
            if id(config) not in kept:
                continue
            # Under the interpreter the config that ran is named in the result's notes; on a GPU every
            # config runs again, so the autotuner's pick is judged by name too.
            if (interpreting and config is ran) or len(meta) >= budget:
                continue
            entry: dict[str, Any] = {
                "kernel": _name(tuner),
                "index": index,
                "of": len(configs),
                "config": _describe(config),
            }
            ctx.mark(f"candidate case {case['key']}")
            tuner.configs = [config]
            try:
                args = common.clone(common.to_device(inputs, device))
                with common.recording(poison=True):
                    grad_out = case.get("grad_out") if params.get("backward") else None
                    args, out, grads = grad_calls.call_candidate(call, args, model_params, grad_out, device)
                    common.sync(device)
            except BaseException as exc:
                if type(exc).__name__ == "OutOfResources":
                    # The autotuner skips a config this GPU cannot run; `ptt compile` reports it per target.
                    entry.update(status="skipped", reason=str(exc)[:300])
                    meta.append(entry)
                    data.append({})
                    continue
                failure = classify_exception(exc, ctx.user_files)
                entry.update(status="failed", failure=failure.model_dump(mode="json"))
                meta.append(entry)
                data.append({})
                if is_sticky_cuda_error(exc):
                    return meta, data
                continue
            finally:
                tuner.configs = configs
                tuner.best_config = ran
            entry["status"] = "ok"
            meta.append(entry)
            data.append(
                {
                    "out": [common.to_cpu(o) if isinstance(o, torch.Tensor) else None for o in out],
                    "grads": common.to_cpu(grads) if grads is not None else None,
                }
            )
    return meta, data


def judge_configs(judge: Any, ref_case: dict, cand_case: dict, ref: dict, cand: dict) -> None:
    """Compare each extra config's outputs with the reference (in the parent, with the judge's rules)."""
    import torch

    from mcp_server.engine.models import FindingKind, Severity

    name, seed = ref_case["name"], ref_case["seed"]
    metas = cand_case.get("configs") or []
    outs = cand.get("configs") or []
    for meta, got in zip(metas, outs, strict=False):
        what = f"autotune config {meta['index']} of {meta['of']} of `{meta['kernel']}` ({meta['config']})"
        if meta.get("status") == "skipped":
            judge.add(
                FindingKind.compile_error,
                f"{name}: {what} does not fit this GPU and was not validated ({meta.get('reason', '')}); the "
                "autotuner skips it here, but another GPU may run it",
                name,
                seed,
                severity=Severity.warning,
            )
            continue
        if meta.get("status") != "ok":
            failure = meta.get("failure") or {}
            try:
                kind = FindingKind(failure.get("kind"))
            except ValueError:
                kind = FindingKind.exception
            judge.add(kind, f"{name} with {what}: {failure.get('message', '')}", name, seed, where=failure.get("where"))
            continue
        ref_out, ref_out64 = ref["out"], ref["out64"]
        cand_out = got.get("out") or []
        if len(cand_out) != len(ref_out):
            judge.add(
                FindingKind.shape_mismatch,
                f"{name} with {what}: {len(cand_out)} output(s); the reference returns {len(ref_out)}",
                name,
                seed,
            )
            continue
        for i, (r, c) in enumerate(zip(ref_out, cand_out, strict=True)):
            if not isinstance(c, torch.Tensor):
                continue  # the main run's comparison already reports a non-tensor output
            label = f"{name} output {i} with {what}" if len(ref_out) > 1 else f"{name} with {what}"
            r64 = ref_out64[i] if ref_out64 is not None and i < len(ref_out64) else None
            judge.compare_one(label, name, seed, f"out{i}@config{meta['index']}", c, r, r64, None)
        grads, got_grads = ref.get("grads"), got.get("grads")
        if grads is not None and got_grads is not None:
            grads64 = ref.get("grads64")
            for j, r in enumerate(grads):
                c = got_grads[j] if j < len(got_grads) else None
                if r is None or c is None:
                    continue
                r64 = grads64[j] if grads64 is not None and j < len(grads64) else None
                judge.compare_one(
                    f"{name} grad {j} with {what}", name, seed, f"grad{j}@config{meta['index']}", c, r, r64, None
                )

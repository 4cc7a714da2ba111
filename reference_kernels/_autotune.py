"""Autotuning infrastructure shared by the reference kernels (host code only; each kernel file keeps its
own configs, keys, pruning and timing budget): ``ParallelAutotuner`` and its ``parallel_autotune``
factory, the short ``tuning_bench``, and ``launch_tuned``, which bypasses the autotuner under the Triton
interpreter."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import triton
from triton.runtime.autotuner import Autotuner

from reference_kernels._common import interpreting


class ParallelAutotuner(Autotuner):
    """``triton.autotune`` that, on a new key, first compiles every config it is about to time on a
    thread pool (Triton's AsyncCompileMode: the MLIR passes and ptxas run outside the GIL), then times
    them as usual, and does not time a lone survivor of the pruning. Tuning a new key costs about one
    compile of wall time instead of one per config (6 configs: 3.6 s serial, 1.5 s on a 2-core machine)."""

    _lone = False

    def prune_configs(self, kwargs: dict) -> list[triton.Config]:
        configs = super().prune_configs(kwargs)
        self._lone = len(configs) == 1
        if len(configs) > 1:
            args = list(self.nargs.values())
            # kwargs also carries the launch's grid and warmup flag; the rest are kernel arguments.
            meta = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
            workers = min(len(configs), os.cpu_count() or 1)
            with ThreadPoolExecutor(workers) as pool, triton.AsyncCompileMode(pool, ignore_errors=True):
                for c in configs:
                    if c.pre_hook is not None:  # descriptor block shapes are part of the signature
                        c.pre_hook({**self.nargs, **meta, **c.all_kwargs()})
                    # Failures are dropped here; timing recompiles them and scores them inf.
                    self.fn.warmup(*args, grid=(1,), **meta, **c.all_kwargs())
        return configs

    def _bench(self, *args: Any, config: triton.Config, **meta: Any) -> list[float]:
        if self._lone:
            return [0.0, 0.0, 0.0]
        return super()._bench(*args, config=config, **meta)


def parallel_autotune(
    configs: list[triton.Config], key: list[str], prune: Any = None, do_bench: Any = None
) -> Callable[[Any], ParallelAutotuner]:
    """``triton.autotune(configs, key, prune_configs_by={"early_config_prune": prune}, do_bench=...)``
    with a ``ParallelAutotuner``; usable as a decorator or as ``parallel_autotune(...)(kernel)``."""
    prune_by = {"early_config_prune": prune} if prune else None
    return lambda fn: ParallelAutotuner(
        fn, fn.arg_names, configs, key, None, None, prune_configs_by=prune_by, do_bench=do_bench
    )


def tuning_bench(kernel_call: Callable[[], None], quantiles: Any) -> Any:
    """Times one config for 5 + 25 ms (triton's default is 25 + 100): thousands of runs of a µs-scale
    kernel, tens of a 0.5 ms one, enough for a median; a new shape costs a quarter of the tuning time."""
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


def launch_tuned(tuned: Any, grid: Any, args: tuple, interpreter_meta: dict[str, int], **meta: Any) -> None:
    """``tuned[grid](*args, **meta)``; under the interpreter, which cannot time configs, the kernel
    behind the autotuner with ``interpreter_meta`` in place of a tuned config."""
    if interpreting():
        tuned.fn[grid](*args, **meta, **interpreter_meta)
    else:
        tuned[grid](*args, **meta)

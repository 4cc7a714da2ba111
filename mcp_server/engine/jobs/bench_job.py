"""Timing inside an isolated child: the candidate, the reference in eager mode and under torch.compile.

Method (one child, one GPU, the GPU lock held by the parent):
- Inputs are rotated among several sets (fresh random values of the same shapes), so no result or cache
  line carries over from one call to the next.
- Warm-up happens before timing: the first call of each provider (Triton compile, autotuning, inductor
  compile) is timed on its own and reported as compile time, then a few more calls.
- Timed calls are enqueued back to back behind a GPU-side sleep long enough for the host to queue the whole
  round, each preceded by new values in its floating inputs and an L2 flush (a read of a buffer twice the L2
  size) outside the timed interval,
  each bracketed by CUDA events: the events measure the GPU's time, not Python's launch path, which is
  measured apart (host_launch_ms). Providers are interleaved in rounds whose order rotates, so drift
  (clocks, temperature) hits every provider alike. Each round's median is reported too (round_ms): the parent
  pairs a peer's with the candidate's of the same round, and calls the two a tie when the rounds disagree.
- A host-clock check: a few calls whose end event is waited for, then the whole device. When the device stays
  busy after the end event (beyond what an empty operation shows), the call left work on another stream; that
  time is added to the reported figure and the disagreement is flagged.
- The outputs of timed calls picked at random are checked against the reference on the same inputs
  (jobs.timed_check): a candidate that skips work or returns a kept result once validate's calls are over gets
  its timing replaced by a ``timed_output_mismatch`` error. Every timed call of a candidate is recorded by the
  torch op recorder (jobs.timed_ops): one that hands its work to PyTorch gets a ``torch_compute`` error.
- CUDA-graph mode captures [flush, call] × n per round and times replays, which takes launch overhead out
  for microsecond kernels; a flush-only graph's time is subtracted.
"""

from __future__ import annotations

import importlib
import math
import secrets
import statistics
import time
from typing import Any

import torch

from mcp_server.engine.inputs import looks_like_type_list, materialise, parse_type_list
from mcp_server.engine.jobs import calls, common, integrity, recorder, shared_state, timed_check, timed_ops
from mcp_server.engine.runner.child import (
    JobContext,
    UsageProblem,
    classify_exception,
    is_sticky_cuda_error,
    load_module,
    resolve,
)

ROUNDS = 5
GRAPH_WRITES_INPUTS = (
    "no timed output was checked: the problem writes its inputs, so in CUDA-graph mode a captured call's outputs are "
    "inputs that the calls after it in the same replay rewrite (events mode checks them)"
)
NO_FRESH_VALUES = (
    "no input here is floating, so timed calls could not be given new values: a result a candidate kept from an "
    "earlier call on the same inputs is right for them, and would be timed unseen"
)
# The longest GPU-side sleep a timing round starts with (ms).
_MAX_SLEEP_MS = 2000.0


# --- peaks ----------------------------------------------------------------------------------------


# Square matmul sizes whose best rate is the ceiling: the bench's timer reads cuBLAS at different rates at the
# two (bf16 on an H200: 760 TFLOP/s at 4096³, 720 at 8192³).
PEAK_MATMUL_SIZES = (4096, 8192)


def peaks(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Device ceilings through PyTorch: copy bandwidth and dense matmul rates per dtype, timed with the bench's
    own timer (L2 flushed before each call, calls queued behind a GPU sleep) so that a kernel the bench times is
    held to a ceiling measured the same way. (With back-to-back calls, as triton.testing.do_bench makes them,
    cuBLAS read 671 TFLOP/s in bf16 on an H200 where the bench's timer measured its same calls at 720–760.)"""
    if not torch.cuda.is_available():
        raise UsageProblem("measuring device peaks needs a CUDA GPU")
    timer = _Timer(timer_l2(torch.cuda.get_device_properties(torch.cuda.current_device())), flush=True)

    def median_ms(fn: Any, calls: int = 20, rounds: int = 3) -> float:
        fn()
        torch.cuda.synchronize()
        return statistics.median(statistics.median(timer.events_round(fn, [[]], calls, 0)) for _ in range(rounds))

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_gbps = 2 * n / median_ms(lambda: dst.copy_(src)) / 1e6
    src = dst = None
    rates: dict[str, float] = {}
    for name, dtype, tf32 in (
        ("bfloat16", torch.bfloat16, False),
        ("float16", torch.float16, False),
        ("tf32", torch.float32, True),
        ("float32", torch.float32, False),
    ):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        best = 0.0
        for size in PEAK_MATMUL_SIZES:
            a = torch.randn(size, size, device="cuda", dtype=dtype)
            b = torch.randn(size, size, device="cuda", dtype=dtype)
            best = max(best, 2 * size**3 / median_ms(lambda a=a, b=b: a @ b) / 1e9)
            del a, b
        rates[name] = best
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"copy_gbps": copy_gbps, "matmul_tflops": rates, "device": torch.cuda.get_device_name()}


# --- cases ----------------------------------------------------------------------------------------


def _substitute(spec: str, values: dict[str, int]) -> str:
    """Replace symbolic dimensions inside [...] (and NAME=SYMBOL scalars) with their values."""
    import re

    def dims(match: re.Match[str]) -> str:
        return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: str(values.get(m.group(0), m.group(0))), match.group(0))

    out = re.sub(r"\[[^\]]*\]", dims, spec)
    return re.sub(r"=\s*([A-Za-z_]\w*)\b", lambda m: "=" + str(values.get(m.group(1), m.group(1))), out)


def parse_sizes(text: str) -> list[dict[str, int]]:
    """'1024,2048' (one symbol, N) or 'M=1024,N=512;M=2048,N=512'."""
    points = []
    for group in text.split(";"):
        group = group.strip()
        if not group:
            continue
        if "=" in group:
            point = {}
            for item in group.split(","):
                key, _, value = item.partition("=")
                point[key.strip()] = int(value)
            points.append(point)
        else:
            points.extend({"N": int(v)} for v in group.split(",") if v.strip())
    if not points:
        raise UsageProblem(f"--sizes {text!r} lists no sizes; write e.g. 1024,2048,4096 or M=1024,N=512;M=2048,N=512")
    return points


def bench_cases(params: dict[str, Any], module: Any, ctx: JobContext) -> list[tuple[str, list[Any]]]:
    inputs = params.get("inputs")
    sizes = params.get("sizes")
    if inputs and looks_like_type_list(inputs):
        if sizes:
            cases = []
            for point in parse_sizes(sizes):
                label = ",".join(f"{k}={v}" for k, v in point.items())
                cases.append((label, materialise(parse_type_list(_substitute(inputs, point)), "cuda")))
            return cases
        return [("inputs", materialise(parse_type_list(inputs), "cuda"))]
    if sizes:
        raise UsageProblem(
            "--sizes needs --inputs with symbolic dimensions, e.g. --inputs 'bf16[4096,N]' --sizes 1024,2048"
        )
    if inputs:
        path, _, name = inputs.rpartition(":")
        value = resolve(load_module(path, ctx.user_files), name)()
        cases = value if isinstance(value, dict) else {"inputs": value}
    else:
        for hook in ("get_bench_cases", "get_test_cases"):
            if hasattr(module, hook):
                cases = getattr(module, hook)()
                break
        else:
            if not hasattr(module, "get_inputs"):
                raise UsageProblem(
                    "No inputs to time: the reference (or candidate) module has no get_bench_cases(), get_test_cases() "
                    "or get_inputs(); pass --inputs."
                )
            cases = {"inputs": module.get_inputs()}
    out = []
    for label, args in cases.items():
        args = list(args) if isinstance(args, list | tuple) else [args]
        common.check_plain(args, f"case {label!r}")
        out.append((str(label), common.to_device(args, "cuda")))
    return out


def _fresh_like(args: list[Any]) -> list[Any]:
    """Another input set of the same shapes and kinds of values (for rotation)."""

    def refill(t: torch.Tensor) -> torch.Tensor:
        if t.numel() == 0:
            return t.clone()
        return common.refill(t, list(t.shape), -1, -1)

    return common.map_tensors(args, refill)


# --- timing ---------------------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(name: str, rounds: list[list[float]], compile_s: float | None) -> dict[str, Any]:
    samples = [s for r in rounds for s in r]
    median = statistics.median(samples)
    p20, p80 = _quantile(samples, 0.2), _quantile(samples, 0.8)
    return {
        "provider": name,
        "median_ms": median,
        "p20_ms": p20,
        "p80_ms": p80,
        "min_ms": min(samples),
        "spread": (p80 - p20) / median if median > 0 else 0.0,
        "samples": len(samples),
        "round_ms": [statistics.median(r) for r in rounds if r],
        "compile_s": compile_s,
    }


def _join_launch_streams() -> None:
    """Make the timed stream wait for every other stream a Triton kernel was launched on, so the end event
    covers work the candidate sent elsewhere."""
    streams = recorder.LAUNCH_STREAMS
    if not streams:
        return
    current = torch.cuda.current_stream()
    mine = recorder.LaunchStreams.key_of(current)
    for key, stream in streams.items():
        if key != mine:
            current.wait_stream(stream)


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


class _Timer:
    """Event timing with the GPU kept ahead of the host, a per-call L2 flush, and a host-clock check."""

    def __init__(self, l2_bytes: int, flush: bool):
        self.flush = flush
        words = max(2 * l2_bytes, 64 << 20) // 4
        self.cache = torch.ones(words, dtype=torch.int32, device="cuda") if flush else None
        self.sink = torch.zeros((), dtype=torch.int64, device="cuda")
        self.tiny = torch.zeros(1, device="cuda")
        start, end = _events()
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        torch.cuda.synchronize()
        self.cycles_per_ms = 1_000_000 / max(start.elapsed_time(end), 1e-3)
        self.host_ms: dict[int, float] = {}
        # Rounds where the host could not stay ahead of the GPU and the round was redone.
        self.starved_rounds = 0

    def do_flush(self) -> None:
        # Read, not write: a write leaves L2 full of dirty lines that the next kernel pays to write back, which
        # no real predecessor guarantees and Nsight Compute's cache control does not do either.
        if self.cache is not None:
            torch.sum(self.cache, dim=0, dtype=torch.int64, out=self.sink)

    def flush_ms(self, n: int = 20) -> float:
        """GPU time of one flush, to subtract from graph timings."""
        if self.cache is None:
            return 0.0
        start, end = _events()
        start.record()
        for _ in range(n):
            self.do_flush()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n

    def events_round(
        self,
        fn: Any,
        sets: list[list[Any]],
        n: int,
        offset: int,
        fresh: list[timed_check.FreshValues] | None = None,
        keeper: timed_check.Keeper | None = None,
        provider: str = "",
        audit: timed_ops.OpAudit | None = None,
    ) -> list[float]:
        """n calls enqueued behind a GPU-side sleep, so each starts the moment the GPU is free: the events
        then measure the GPU's time, not the Python launch path (which is measured apart, as host_launch_ms).

        The round counts only if the host finished enqueueing before the sleep ended (then the GPU never
        waited for the host inside a timed interval); otherwise it is redone with a longer sleep. The sleep
        is calibrated against its measured length every round, since clocks change under load."""
        head_ms = max(1.0, 1.5 * n * self.host_ms.get(id(fn), 0.05))
        times: list[float] = []
        for _attempt in range(4):
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            sleep_start, sleep_end = _events()
            torch.cuda.synchronize()
            head_ms = min(head_ms, _MAX_SLEEP_MS)
            cycles = int(head_ms * self.cycles_per_ms)
            sleep_start.record()
            torch.cuda._sleep(cycles)
            sleep_end.record()
            host0 = time.perf_counter()
            aside_s = 0.0  # host time spent on new values and kept copies, not on the call
            for i in range(n):
                which = (offset + i) % len(sets)
                args = sets[which]
                before = None
                if fresh is not None:
                    t0 = time.perf_counter()
                    fresh[which].refresh()
                    before = keeper.inputs_before(provider, args) if keeper is not None else None
                    aside_s += time.perf_counter() - t0
                self.do_flush()
                starts[i].record()
                out, cost_s = timed_ops.run(audit, provider, fn, args)
                aside_s += cost_s
                _join_launch_streams()
                ends[i].record()
                if keeper is not None:
                    t0 = time.perf_counter()
                    keeper.after_call(provider, n, args, out, fn, before)
                    aside_s += time.perf_counter() - t0
                del out
            enqueue_ms = (time.perf_counter() - host0) * 1e3
            torch.cuda.synchronize()
            slept_ms = sleep_start.elapsed_time(sleep_end)
            if slept_ms > 0:
                self.cycles_per_ms = cycles / slept_ms
            self.host_ms[id(fn)] = (enqueue_ms - aside_s * 1e3) / n
            times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
            if enqueue_ms < slept_ms:
                return times
            self.starved_rounds += 1
            if head_ms >= _MAX_SLEEP_MS:
                # The longest sleep did not let the host get ahead: its launch queue filled behind the sleep
                # (thousands of launches per call) or it is slower than the sleep. A longer sleep cannot help, so
                # these times stand: they include the host's pace, which is this provider's real cost.
                return times
            head_ms = 1.5 * enqueue_ms * (2 + _attempt)
        return times

    def host_check(self, fn: Any, sets: list[list[Any]], k: int = 7) -> tuple[float, float]:
        """Per call, how long a device-wide sync still waits once the call's end event has completed, beyond what an
        empty operation shows: ~0, unless the call leaves work on a stream the end event does not wait for. And the
        host's time for the call itself (ms, the median of the same ``k`` calls).

        Measured from the end event's completion, not from the call's start: a host slower than the GPU (Python, the
        threads autograd runs a backward on) delays the events as much as the work, so it adds nothing here. (Host
        time minus event time, measured from the call's start, read 20–40 µs of such delay as outside work on
        forward + backward calls of 60–120 µs.)

        The host time is taken here, each call started on an idle GPU right after the last one, and not from a timing
        round's enqueueing: there the host also waits whenever the queue of launches behind the round's GPU sleep is
        full, which on an H200 read a 34 µs RMSNorm launch as 186 µs. Nor right after an L2 flush: the host's wait
        for the flush added 25–30 µs to the next call's host time there. The figure still includes what the launch
        hooks of this process add, and is noisy: on an H200 host the median of 60–100 such calls differed by up to
        1.6× between two runs. (Behind a GPU sleep, as a call in a loop is enqueued behind the work before it, the same
        calls took the host longer, not shorter: benchmarks/host_layers.py.) A call that waits for the GPU itself (a
        read back to the host) still counts that wait, as it would in the user's loop."""
        hosts = []
        for i in range(k):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(*sets[i % len(sets)])
            hosts.append((time.perf_counter() - t0) * 1e3)

        def tail(call: Any) -> float:
            tails = []
            for i in range(k):
                self.do_flush()
                torch.cuda.synchronize()
                end = torch.cuda.Event()
                call(i)
                _join_launch_streams()
                end.record()
                end.synchronize()
                t0 = time.perf_counter()
                torch.cuda.synchronize()
                tails.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(tails)

        baseline = tail(lambda i: self.tiny.add_(1.0))
        return max(0.0, tail(lambda i: fn(*sets[i % len(sets)])) - baseline), statistics.median(hosts)

    def graph_round(
        self,
        fn: Any,
        sets: list[list[Any]],
        n: int,
        replays: int,
        provider: str = "",
        audit: timed_ops.OpAudit | None = None,
        fresh: list[timed_check.FreshValues] | None = None,
        keeper: timed_check.Keeper | None = None,
    ) -> list[float]:
        """n calls captured once (each after an L2 flush) and replayed; the torch ops a covered provider runs are
        recorded at capture, which is everything its replays run.

        Every replay first gets new values in every input set (outside the timed interval). For a checked provider
        up to two captured calls, on different input sets, and one replay are drawn (``secrets``,
        ``timed_check.graph_picks``): the calls' outputs are held by reference from capture on, and copied after
        that replay, when they hold what it computed from that replay's values. (Not for a problem that writes its
        inputs: its outputs are inputs that later calls of the replay rewrite; the caller passes no keeper then.)"""
        checked = keeper is not None and provider in keeper.providers
        picks = timed_check.graph_picks(n, len(sets)) if checked else []
        pick_replay = secrets.randbelow(replays) if checked else -1
        held: list[timed_check.Held] = []
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            for i in range(2):  # warm the capture stream
                fn(*sets[i % len(sets)])
        torch.cuda.current_stream().wait_stream(stream)
        with recorder.judge_capture(), torch.cuda.graph(graph):
            for i in range(n):
                self.do_flush()
                args = sets[i % len(sets)]
                out, _ = timed_ops.run(audit, provider, fn, args)
                if i in picks and keeper is not None:
                    held.append(keeper.hold(args, out, fn))
                del out
        flush = self.flush_ms()
        samples = []
        for r in range(replays):
            for f in fresh or ():
                f.refresh()
            start, end = _events()
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            samples.append(max(0.0, start.elapsed_time(end) / n - flush))
            if r == pick_replay and keeper is not None:
                for call in held:
                    keeper.store(provider, call)
        del graph, held
        return samples


class _TimedCheck:
    """The timed-output check of one bench (jobs.timed_check): which providers it covers, and what failed."""

    def __init__(
        self,
        reference: Any,
        backward: bool,
        providers: set[str],
        overrides: Any,
        scale: float,
        switch: shared_state.Switch | None = None,
    ):
        self.reference = reference
        # The reference runs under its own PyTorch state, not the candidate's (jobs.shared_state).
        self.switch = switch
        self.backward = backward
        self.providers = providers if reference is not None else set()
        self.overrides = overrides
        self.scale = scale
        # Per provider judged by a validation of its own (an extra candidate's), that validation's error scale.
        self.scales: dict[str, float] = {}
        self.failures: dict[str, str] = {}
        # Per provider, the largest distance of a checked output from the reference, as a fraction of its limit.
        self.margins: dict[str, float] = {}
        # Per output, the reference's own error at this case's size (timed_check.reference_errors), measured on the
        # case's first kept call, and again on any later call that would fail with it (verify).
        self.own_errors: list[float] | None = None

    def start_case(self) -> None:
        """Margins and the reference's own errors are per case (a failure stays: the provider's timings are not
        reported from then on)."""
        self.margins = {}
        self.own_errors = None

    def keeper(self) -> timed_check.Keeper | None:
        return timed_check.Keeper(self.providers, self.backward) if self.providers else None

    def verify(self, keeper: timed_check.Keeper | None) -> None:
        """Compare every call kept since the last verify with the reference on its inputs; the first
        disagreement per provider is kept."""
        if keeper is None:
            return
        if self.switch is not None:
            self.switch.to("reference")
        for kept in keeper.take():
            if kept.provider in self.failures:
                continue
            if kept.problem:
                self.failures[kept.provider] = f"{kept.problem}. The timing is not reported."
                continue
            changed = kept.source.changed(kept.inputs, kept.state) if kept.source is not None else None
            if changed:
                self.failures[kept.provider] = (
                    f"a timed call changed its inputs: {changed} is not what the call was given. The timing is not "
                    "reported: a call that overwrites its inputs (zeroes them, say) makes the reference's answer on "
                    "them whatever it returned, and the problem's reference does not write its inputs"
                )
                continue
            # Copied before the reference runs (it may write its inputs); the float64 run uses it only where the
            # reference's own error is measured.
            wide = timed_check.widened(kept)
            try:
                want = timed_check.reference_outputs(self.reference, kept, self.backward)
            except Exception:  # the reference refuses these values: no truth to check this call against
                keeper.checked[kept.provider] -= 1
                continue
            measured_here = self.own_errors is None
            if measured_here:
                self.own_errors = timed_check.reference_errors(self.reference, wide, self.backward, want)
            margins: list[float] = []
            scale = self.scales.get(kept.provider, self.scale)
            problem = timed_check.compare_outputs(kept.outputs, want, self.overrides, scale, margins, self.own_errors)
            if problem and not measured_here:
                # PyTorch's own error moves with the values and, forward + backward, with the upstream gradient (a
                # gradient summed over a batch with random signs cancels more on one draw than another): a candidate
                # more accurate than PyTorch is PyTorch's error on this call away from its answer. Measured here
                # before the call fails.
                here = timed_check.reference_errors(self.reference, wide, self.backward, want)
                if here:
                    margins = []
                    problem = timed_check.compare_outputs(kept.outputs, want, self.overrides, scale, margins, here)
            self.margins[kept.provider] = max([self.margins.get(kept.provider, 0.0), *margins])
            if problem:
                self.failures[kept.provider] = (
                    f"a timed call's result is not the reference's on the same inputs — {problem}. The timing "
                    "is not reported: validate judged other calls than the ones timed (does the candidate "
                    "count its calls, or keep results between them?)"
                )
            del want, kept, wide
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def cover_unchecked(
        self,
        keeper: timed_check.Keeper,
        live: list[dict[str, Any]],
        sets: list[list[Any]],
        fresh: list[timed_check.FreshValues],
    ) -> None:
        """A provider no draw picked (e^-10 of the time: two draws a round, five rounds) gets one more call, with new
        values, checked."""
        for t in live:
            name = t["provider"]
            if name in keeper.providers and not keeper.checked.get(name):
                if self.switch is not None:
                    self.switch.run_as(name)
                fresh[0].refresh()
                before = keeper.inputs_before(name, sets[0])
                out = t["_fn"](*sets[0])
                keeper.keep(name, sets[0], out, t["_fn"], before)
                self.verify(keeper)


def _as_leaves(args: list[Any], grad_idx: list[int] | None) -> list[Any]:
    """Floating inputs (those listed, or all) become leaves that take gradients."""
    out = []
    for i, a in enumerate(args):
        wanted = grad_idx is None or i in grad_idx
        if isinstance(a, torch.Tensor) and a.is_floating_point() and wanted:
            a = a.detach().requires_grad_(True)
        out.append(a)
    return out


def _forward_backward(fn: Any, grad_idx: list[int] | None) -> Any:
    """Time forward + backward: call, then backpropagate a fixed random upstream gradient (made once per set)."""
    upstream: dict[int, list[torch.Tensor]] = {}

    def call(*args: Any) -> Any:
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                a.grad = None
        outs = [o for o in common.flatten_outputs(fn(*args)) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            raise UsageProblem(
                "backward timing needs outputs that require grad (wrap the kernel in a torch.autograd.Function)"
            )
        # One fixed upstream gradient per input set; keyed by identity and shape, since a freed set's id can
        # be reused by the next case's tensors.
        key = (id(args[0]) if args else 0, tuple(tuple(o.shape) for o in outs))
        if key not in upstream:
            upstream[key] = [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, upstream[key])
        call.last = (outs, upstream[key])  # what a timed-output check copies
        return outs[0]

    return call


def _op_names(ops: Any) -> set[str]:
    return {op.split(".")[-1] for op in ops or ()}


def _extra_provider(
    spec: dict[str, str], ctx: JobContext, kernelbench: bool, init: list[Any], weights: dict[str, Any]
) -> Any:
    """An extra candidate's callable: a KernelBench ``ModelNew`` built with the problem's init inputs and given the
    reference's weights, as the candidate is. One that cannot be loaded or built is a provider whose every call
    raises what loading raised, so that its rows carry the error and the candidate's timings stand."""
    try:
        fn = resolve(load_module(spec["path"], ctx.user_files), spec["name"])
        if kernelbench and isinstance(fn, type) and issubclass(fn, torch.nn.Module):
            torch.manual_seed(1234)
            fn = fn(*init).cuda()
            if set(weights) == set(fn.state_dict()):
                fn.load_state_dict(weights)
        return fn
    except Exception as exc:  # the extra's own code failed: its timings carry it, the candidate's stand
        if is_sticky_cuda_error(exc):
            raise
        error = exc

        def failed(*args: Any) -> Any:
            raise error

        return failed


def _first_call(fn: Any, args: list[Any]) -> tuple[Any, float]:
    torch.cuda.synchronize()
    started = time.perf_counter()
    out = fn(*args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - started


def run(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    if not torch.cuda.is_available():
        raise UsageProblem("bench needs a CUDA GPU; interpreter timings are meaningless")
    common.install_launch_hooks()
    recorder.LAUNCH_STREAMS = recorder.LaunchStreams()
    # The candidate's code runs under its own PyTorch state, the reference's and the baselines' under theirs.
    checked = {"candidate", *(params.get("checked") or [])}
    switch = shared_state.Switch(candidates=checked)
    reference = ref_module = None
    if params.get("reference"):
        ref_module = load_module(params["reference"]["path"], ctx.user_files)
        reference = resolve(ref_module, params["reference"]["name"])
        if params.get("baselines", True) and params.get("compile_baseline", True):
            # Loaded for the compile baseline anyway; before the candidate's code, so that what it wraps when it
            # loads (torch.manual_seed, nn.Module.__init__) is the reference's state, not a change of the candidate's.
            importlib.import_module("torch._dynamo")
    # The judge's own code and the library functions its timing uses, as they are before any candidate code runs.
    switch.guard = integrity.Guard()
    switch.to("candidate")
    cand_module = load_module(params["candidate"]["path"], ctx.user_files)
    candidate = resolve(cand_module, params["candidate"]["name"])
    if calls.is_kernel(candidate):
        calls.check_candidate(candidate, [], params["candidate"]["name"], cand_module)
    kernelbench = isinstance(reference, type) and issubclass(reference, torch.nn.Module)
    init: list[Any] = []
    weights: dict[str, Any] = {}
    if kernelbench:
        init = list(ref_module.get_init_inputs()) if hasattr(ref_module, "get_init_inputs") else []
        switch.to("reference")
        torch.manual_seed(1234)
        reference = reference(*init).cuda()
        weights = reference.state_dict()
        switch.to("candidate")
        torch.manual_seed(1234)
        candidate = candidate(*init).cuda()
        if set(weights) == set(candidate.state_dict()):
            candidate.load_state_dict(weights)
    elif isinstance(candidate, type) and issubclass(candidate, torch.nn.Module):
        raise UsageProblem("The candidate is an nn.Module class; give the KernelBench problem file as the reference.")

    switch.to("reference")
    torch.manual_seed(0)
    cases = bench_cases(params, ref_module or cand_module, ctx)
    if cases:
        name = params["candidate"]["name"]
        switch.to("candidate")
        calls.check_candidate(
            candidate.forward if kernelbench else candidate,
            list(cases[0][1]),
            f"{name}.forward" if kernelbench else name,
            cand_module,
            what="the benchmark's",
        )
    switch.to("reference")
    props = torch.cuda.get_device_properties(0)
    timer = _Timer(int(getattr(props, "L2_cache_size", 50 << 20)), params.get("l2_flush", True))
    providers: list[tuple[str, Any]] = [("candidate", candidate)]
    for name, spec in (params.get("extra_candidates") or {}).items():
        switch.run_as(name)
        providers.append((name, _extra_provider(spec, ctx, kernelbench, init, weights)))
    switch.to("reference")
    compiled = None
    if reference is not None and params.get("baselines", True):
        providers.append(("eager", reference))
        if params.get("compile_baseline", True):
            torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
            compiled = torch.compile(reference, dynamic=False)
            providers.append(("compile", compiled))
    if params.get("backward"):
        grad_idx = params.get("grad_inputs")
        providers = [(name, _forward_backward(fn, grad_idx)) for name, fn in providers]
    model_module = ref_module or cand_module
    reps = int(params.get("reps", 100))
    mode = params.get("mode", "events")
    free, _ = torch.cuda.mem_get_info()

    check = _TimedCheck(
        reference,
        bool(params.get("backward")),
        checked,
        timed_check.module_tolerances(ref_module) if ref_module is not None else None,
        float(params.get("check_scale") or 0.0),
        switch,
    )
    audit = timed_ops.OpAudit(
        checked,
        _op_names(params.get("allow_torch_ops")),
        timed_ops.share_limit(params.get("validated_torch_share")),
    )
    # An extra candidate with a validation of its own (a stage-1 attempt timed beside the candidate) is held to
    # that validation's errors, torch work and allowed ops, not to the candidate's.
    for label, own in (params.get("extra_checks") or {}).items():
        check.scales[label] = float(own.get("check_scale") or 0.0)
        audit.own[label] = (
            _op_names(own.get("allow_torch_ops")),
            timed_ops.share_limit(own.get("validated_torch_share")),
        )
    audit.calibrate("cuda")
    ref_call = None
    if reference is not None:
        ref_call = _forward_backward(reference, params.get("grad_inputs")) if params.get("backward") else reference
    rows = []
    notes: set[str] = set()
    total_steps = len(cases) * len(providers)
    step = 0
    for label, args in cases:
        set_bytes = sum(t.numel() * t.element_size() for t in common.iter_tensors(args))
        n_sets = params.get("input_sets")
        if not n_sets:
            n_sets = max(2, min(8, math.ceil(4 * timer_l2(props) / max(set_bytes, 1))))
            n_sets = max(1, min(n_sets, int(0.25 * free // max(set_bytes, 1))))
        torch.manual_seed(1)
        sets = [args] + [_fresh_like(args) for _ in range(n_sets - 1)]
        if params.get("backward"):
            sets = [_as_leaves(s, params.get("grad_inputs")) for s in sets]
            args = sets[0]
        row: dict[str, Any] = {"case": label, "timings": [], "input_sets": n_sets}
        # Roofline model: the user's functions, else inputs read once + outputs written once.
        out_bytes = 0
        out_numel = 0
        for name, fn in providers:
            step += 1
            ctx.progress(step - 1, total_steps, f"{label}: {name} (compile + warm-up)")
            switch.run_as(name)
            try:
                out, first_s = _first_call(fn, args)
                if name == "candidate":
                    out_bytes = sum(t.numel() * t.element_size() for t in common.iter_tensors(out))
                    out_numel = sum(t.numel() for t in common.iter_tensors(out))
                # Warm-up: a few calls over every set, untimed.
                for i in range(max(3, len(sets))):
                    fn(*sets[i % len(sets)])
                torch.cuda.synchronize()
                ctx.progress(step - 0.5, total_steps, f"{label}: {name} (timing)")
                row["timings"].append({"provider": name, "compile_s": first_s, "_fn": fn})
            except Exception as exc:
                failure = classify_exception(exc, ctx.user_files)
                row["timings"].append({"provider": name, "error": f"{failure.kind.value}: {failure.message}"[:500]})
                if is_sticky_cuda_error(exc):
                    raise
        live = [t for t in row["timings"] if "_fn" in t]
        switch.to("reference")
        audit.start_case(ref_call, sets[0], float(out_numel))
        check.start_case()
        rounds: dict[str, list[list[float]]] = {t["provider"]: [] for t in live}
        per_round = max(3, reps // ROUNDS)
        fresh = [timed_check.FreshValues(s) for s in sets]
        if not any(f.plan for f in fresh):
            notes.add(NO_FRESH_VALUES)
        keeper = check.keeper()
        if keeper is not None:
            keeper.sources = {id(s): f for s, f in zip(sets, fresh, strict=True)}
            keeper.before = timed_check.writes_inputs(reference, sets[0])  # a keeper means a reference
        graph_keeper = keeper
        if mode == "cuda-graph" and keeper is not None and keeper.before:
            graph_keeper = None
            notes.add(GRAPH_WRITES_INPUTS)
        for rnd in range(ROUNDS):
            order = live[rnd % len(live) :] + live[: rnd % len(live)] if live else []
            for t in order:
                switch.run_as(t["provider"])
                if mode == "cuda-graph":
                    got = timer.graph_round(t["_fn"], sets, per_round, 3, t["provider"], audit, fresh, graph_keeper)
                else:
                    got = timer.events_round(
                        t["_fn"], sets, per_round, rnd * per_round, fresh, keeper, t["provider"], audit
                    )
                rounds[t["provider"]].append(got)
                check.verify(keeper)
        if keeper is not None and (mode == "events" or graph_keeper is not None):
            check.cover_unchecked(keeper, live, sets, fresh)
        for t in row["timings"]:
            fn = t.pop("_fn", None)
            if fn is None:
                continue
            t.update(_stats(t["provider"], rounds[t["provider"]], t.get("compile_s")))
            switch.run_as(t["provider"])
            t["outside_stream_ms"], host_ms = timer.host_check(fn, sets)
            # A graph's replay has no launch path of the call's own to report.
            t["host_launch_ms"] = host_ms if mode != "cuda-graph" else None
            switch.to("reference")
            if keeper is not None and t["provider"] in keeper.providers:
                t["checked_calls"] = keeper.checked.get(t["provider"], 0)
                t["check_margin"] = check.margins.get(t["provider"])
                if t["provider"] in check.failures:
                    t["error"] = f"{timed_check.PREFIX}: {check.failures[t['provider']]}"
            if audit.covers(t["provider"]):
                t["torch_share"] = audit.worst.get(t["provider"], 0.0)
                t["error"] = t.get("error") or audit.error(t["provider"])
        grad_bytes = None
        if params.get("backward"):
            grad_bytes = sum(t.numel() * t.element_size() for t in common.iter_tensors(args) if t.requires_grad)
        row["bytes"], row["flops"], row["model"] = _model(model_module, args, set_bytes, out_bytes, grad_bytes)
        row["dtype"] = _first_float_dtype(args)
        rows.append(row)
        ctx.progress(step, total_steps, f"{label}: done")
        del sets
        torch.cuda.empty_cache()
    notes_out = sorted(notes) + _state_notes(switch)
    replaced = switch.guard.replaced + recorder.replaced_kernels() + recorder.native_loads()
    if replaced:
        _refuse_all(rows, checked, replaced)
    _refuse_interfering(rows, recorder.interference())
    return {
        "rows": rows,
        "device": torch.cuda.get_device_name(),
        "mode": mode,
        "l2_bytes": timer_l2(props),
        "reps": reps,
        "kernelbench": kernelbench,
        "notes": notes_out,
    }


def _refuse_all(rows: list[dict[str, Any]], checked: set[str], replaced: list[str]) -> None:
    """Every timing of the candidate (and extra candidates) is refused: while their code ran, the judge's own code
    (its timer, its checks, or a library function they go through) or a torch op's kernel was replaced, or the op
    recorder's state changed."""
    listed = ", ".join(replaced[:6]) + (f" and {len(replaced) - 6} more" if len(replaced) > 6 else "")
    error = (
        f"evasion: the candidate's code replaced the judge's own code or a torch op's kernel, or changed the op "
        f"recorder's state, in the process while it ran ({listed}); no timing of it is reported"
    )
    _refuse(rows, dict.fromkeys(checked, error))


def _refuse(rows: list[dict[str, Any]], errors: dict[str, str], keep_first: bool = False) -> None:
    """Every timing of each provider in ``errors`` carries its error (``keep_first``: unless it has one already)."""
    for row in rows:
        for t in row["timings"]:
            if t["provider"] in errors and not (keep_first and t.get("error")):
                t["error"] = errors[t["provider"]]


def _refuse_interfering(rows: list[dict[str, Any]], counts: dict[str, int]) -> None:
    """Every timing of a submitted provider whose threads launched GPU work while the process ran another's code is
    refused: that work ran beside whatever was timed then (a stage-1 attempt, a baseline) and slowed it. A thread
    that lingers after its call returns is not part of the call; its work is not the call's cost either."""
    errors = {
        who: f"evasion: threads its code started launched GPU work ({n} Triton launches or torch ops) while other "
        "providers' code ran (timed or checked), where it slows whatever runs then; no timing of it is reported. "
        "Join every thread a call starts before the call returns"
        for who, n in counts.items()
        if n
    }
    _refuse(rows, errors, keep_first=True)  # (an error found first stands)


def _state_notes(switch: shared_state.Switch) -> list[str]:
    """What the candidate (or an extra candidate) changed in the PyTorch and Triton state it shares with the other
    providers, which ran without it."""
    switch.to("reference")
    out = []
    for who in sorted(switch.changed, key=lambda name: (name != "candidate", name)):
        names = sorted(switch.changed[who])
        if not names:
            continue
        listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        label = "the candidate" if who == "candidate" else f"the extra candidate {who}"
        out.append(
            f"{label} changes PyTorch or Triton state it shares with the other providers ({listed}): the baselines, "
            f"the reference's checks and every other provider ran with the state from before its code ran, "
            f"{label} with its own"
        )
    return out


def timer_l2(props: Any) -> int:
    return int(getattr(props, "L2_cache_size", 50 << 20))


def _first_float_dtype(args: list[Any]) -> str | None:
    for t in common.iter_tensors(args):
        if t.is_floating_point():
            return str(t.dtype).replace("torch.", "")
    return None


def _model(
    module: Any, args: list[Any], in_bytes: int, out_bytes: int, grad_bytes: int | None = None
) -> tuple[int, int, str]:
    """(bytes, FLOPs, where they came from) for one case. Forward: the module's ``bytes_moved`` /
    ``flops``, else the inputs read once and the outputs written once. Forward + backward (``grad_bytes``
    given: the bytes of the gradients the inputs receive): the module's ``bytes_moved_fwd_bwd`` /
    ``flops_fwd_bwd``, else the forward's model plus a backward that reads the upstream gradients and the
    inputs once and writes the gradients once, and three times the forward's FLOPs (one matmul-like
    forward costs two more in its backward)."""
    fwd_bytes = _module_count(module, "bytes_moved", args)
    fwd_flops = _module_count(module, "flops", args) or 0
    source = "bytes_moved()/flops() of the module" if fwd_bytes is not None else "default estimate"
    if fwd_bytes is None:
        fwd_bytes = in_bytes + out_bytes
    if grad_bytes is None:
        if source == "default estimate":
            source += " (inputs read once + outputs written once)"
        return fwd_bytes, fwd_flops, source
    both_bytes = _module_count(module, "bytes_moved_fwd_bwd", args)
    both_flops = _module_count(module, "flops_fwd_bwd", args)
    if both_flops is None:
        both_flops = 3 * fwd_flops
    if both_bytes is not None:
        return both_bytes, both_flops, "bytes_moved_fwd_bwd()/flops_fwd_bwd() of the module"
    source = (
        f"forward: {source}; backward estimate: upstream gradients and inputs read once, gradients written "
        "once, twice the forward's FLOPs"
    )
    return fwd_bytes + out_bytes + in_bytes + grad_bytes, both_flops, source


def _module_count(module: Any, name: str, args: list[Any]) -> int | None:
    """``module.name(*args)`` as an int, or None when the module has no such function or it fails."""
    fn = getattr(module, name, None)
    if not callable(fn):
        return None
    try:
        return int(fn(*args))
    except Exception:
        return None

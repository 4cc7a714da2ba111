"""jobs.timed_ops: bench records the torch ops every timed call runs and withholds a timing whose calls ran more
torch compute than the validation saw. The recorder runs on CPU tensors here; the GPU tests in test_bench.py run
it inside bench (a candidate that hands its timed calls to PyTorch, and its honest twin)."""

from __future__ import annotations

import pytest
import torch

from mcp_server.engine.jobs import timed_ops as to
from mcp_server.engine.jobs.bench_job import _forward_backward
from mcp_server.engine.jobs.recorder import TORCH_WORK_ERROR, TORCH_WORK_WARNING


def _args(n: int = 4096) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(n, generator=g), torch.randn(n, generator=g)]


def _audit(limit: float, allow: set[str] | None = None) -> to.OpAudit:
    audit = to.OpAudit({"candidate"}, allow or set(), limit)
    audit.start_case(lambda x, y: x + y, _args(), fallback=1.0)
    return audit


def test_the_limit_is_the_validations_share_plus_the_warning_level_or_the_error_level_without_one():
    assert to.share_limit(None) == TORCH_WORK_ERROR
    assert to.share_limit(0.0) == TORCH_WORK_WARNING
    assert to.share_limit(0.3) == pytest.approx(0.3 + TORCH_WORK_WARNING)


def test_a_call_that_hands_the_work_to_torch_is_over_the_limit_and_named():
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    with audit.call("candidate"):
        torch.add(x, y)
    assert audit.worst["candidate"] == pytest.approx(1.0)  # the reference's own work: one add of n elements
    error = audit.error("candidate")
    assert error and error.startswith(f"{to.PREFIX}: ") and "aten.add ×1" in error and "100%" in error


def test_a_call_that_hands_the_work_to_a_waiting_worker_thread_is_over_the_limit_too():
    from concurrent.futures import ThreadPoolExecutor

    from mcp_server.engine.jobs import recorder

    recorder.install_launch_hooks()  # bench installs them before it loads the candidate
    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(int).result()  # started before the timed calls, as a candidate's pool at import would be
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    with audit.call("candidate"):
        pool.submit(torch.add, x, y).result()
    pool.shutdown()
    assert audit.worst["candidate"] == pytest.approx(1.0)
    assert "aten.add ×1" in (audit.error("candidate") or "")


def test_allocation_copies_and_views_are_not_counted_and_an_allowed_op_is_not_either():
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    with audit.call("candidate"):
        out = torch.empty_like(x)
        out.copy_(x.view(-1).clone())
        torch.zeros_like(y)
        torch.randn_like(y)  # drawing values is not the kernel's arithmetic either
    assert audit.worst["candidate"] == 0.0 and audit.error("candidate") is None
    allowed = _audit(to.share_limit(0.0), allow={"add"})
    with allowed.call("candidate"):
        torch.add(x, y)
    assert allowed.error("candidate") is None


def test_the_worst_call_decides_not_the_average():
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    for i in range(20):
        with audit.call("candidate"):
            if i == 7:  # one call in twenty
                torch.add(x, y)
    assert audit.error("candidate")


def test_a_share_within_the_validations_own_plus_the_margin_passes():
    # Validation saw the candidate run 40 % of the reference's work in torch (a warning there): bench allows 50 %.
    audit = _audit(to.share_limit(0.4))
    x, y = _args()
    with audit.call("candidate"):
        torch.add(x[: int(0.45 * x.numel())], y[: int(0.45 * y.numel())])
    assert audit.error("candidate") is None
    with audit.call("candidate"):
        torch.add(x[: int(0.6 * x.numel())], y[: int(0.6 * y.numel())])
    assert audit.error("candidate")


def test_each_case_is_judged_against_its_own_reference_work():
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    with audit.call("candidate"):
        torch.add(x, y)
    big = _args(1 << 16)
    audit.start_case(lambda x, y: x + y, big, fallback=1.0)
    assert "candidate" not in audit.worst  # the last case's calls are forgotten
    with audit.call("candidate"):
        torch.add(x, y)  # the small add: 1/16 of this case's work
    assert audit.worst["candidate"] == pytest.approx(1 / 16) and audit.error("candidate") is None


def test_a_reference_without_counted_ops_or_one_that_fails_still_gives_a_scale():
    x, y = _args()
    audit = to.OpAudit({"candidate"}, set(), 0.1)
    audit.start_case(lambda x, y: x.clone(), [x, y], fallback=7.0)
    assert audit.ref_work == x.numel()  # its output's size, as validate does

    def broken(x, y):
        raise RuntimeError("no")

    audit.start_case(broken, [x, y], fallback=7.0)
    assert audit.ref_work == 7.0
    audit.start_case(None, [x, y], fallback=0.0)
    assert audit.ref_work == 1.0


def test_forward_backward_calls_count_the_backwards_torch_ops_on_both_sides():
    class TorchMul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return torch.empty_like(x).copy_(x)  # no counted op forward

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, g * x  # the backward's work in torch

    x, y = (t.requires_grad_(True) for t in _args())
    audit = to.OpAudit({"candidate"}, set(), to.share_limit(0.0))
    audit.start_case(_forward_backward(lambda a, b: a * b, None), [x, y], fallback=1.0)
    assert audit.ref_work >= 3 * x.numel()  # the reference's forward mul and its two backward muls
    with audit.call("candidate"):
        _forward_backward(TorchMul.apply, None)(x, y)
    assert audit.worst["candidate"] >= 0.5 and audit.error("candidate")


def test_the_recorders_host_cost_is_measured_per_dispatched_op():
    audit = to.OpAudit({"candidate"}, set(), 0.1)
    audit.calibrate("cpu", n=50)
    assert 0.0 <= audit.op_cost_s < 1e-3
    audit.start_case(None, [], fallback=1.0)
    with audit.call("candidate") as cost:
        for _ in range(10):
            torch.empty(1)
    assert cost[0] == pytest.approx(10 * audit.op_cost_s)
    assert not audit.covers("eager")


def test_run_records_only_the_providers_the_audit_covers():
    audit = _audit(to.share_limit(0.0))
    x, y = _args()
    out, _ = to.run(audit, "eager", torch.add, [x, y])  # a baseline: not recorded
    assert torch.equal(out, x + y) and "eager" not in audit.worst
    out, cost = to.run(audit, "candidate", torch.add, [x, y])
    assert torch.equal(out, x + y) and audit.worst["candidate"] == pytest.approx(1.0) and cost >= 0.0
    assert to.run(None, "candidate", torch.add, [x, y])[1] == 0.0


def test_an_extra_candidate_with_a_validation_of_its_own_is_held_to_its_own_limit_and_allowed_ops():
    # The stage-1 attempt timed beside a candidate: its validation saw it run the add in torch with aten.add allowed;
    # the candidate's saw none. The same call is over the candidate's limit and within the stage-1 attempt's.
    audit = to.OpAudit({"candidate", "stage1"}, set(), to.share_limit(0.0))
    audit.own["stage1"] = ({"add"}, to.share_limit(0.0))
    audit.start_case(lambda x, y: x + y, _args(), fallback=1.0)
    x, y = _args()
    for provider in ("candidate", "stage1"):
        with audit.call(provider):
            torch.add(x, y)
    assert "aten.add ×1" in (audit.error("candidate") or "")
    assert audit.worst["stage1"] == 0.0 and audit.error("stage1") is None
    # Its own share limit too: a validation that saw it run 90 % of the work in torch lets it keep doing so.
    shared = to.OpAudit({"candidate", "stage1"}, set(), to.share_limit(0.0))
    shared.own["stage1"] = (set(), to.share_limit(0.9))
    shared.start_case(lambda x, y: x + y, _args(), fallback=1.0)
    for provider in ("candidate", "stage1"):
        with shared.call(provider):
            torch.add(x, y)
    assert shared.error("candidate") and shared.error("stage1") is None

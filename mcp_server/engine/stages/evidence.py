"""Where the ledger's evidence comes from: the engine's own tools, or (in tests) recorded results.

``submit`` calls three functions, each with keyword arguments ``reference``, ``candidate`` (``path.py:name``)
and ``inputs`` (a spec or None):

- ``validate(...) -> ValidateResult``; raises ``UsageError`` on misuse.
- ``bench(..., validation=..., extra_candidates=...) -> BenchResult``; raises ``EnvironmentUnavailable`` where
  nothing can be timed. ``validation`` is the ``ValidateResult`` the ledger has just made for this file: the
  bench's checks of its timed calls allow the errors and the torch work that validation measured.
  ``extra_candidates``: label → ``ExtraCandidate``, other attempts timed in the same rounds (the stage-1 attempt).
- ``audit(...) -> report`` with ``findings`` whose items have a ``severity``; raises ``AuditUnavailable``
  (or ``ImportError``) when no audit exists here. Only error findings matter to the gate.

The real ones import lazily: bench and the full audit are newer than the ledger, and a missing module
must read as "not measurable here", never as a pass.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_server.engine.errors import EnvironmentUnavailable
from mcp_server.engine.models import BenchResult, ExtraCandidate, ValidateResult


class AuditUnavailable(Exception):
    """No audit can run here (the module is missing, or it cannot handle this candidate)."""


@dataclass(frozen=True)
class EvidenceFns:
    validate: Callable[..., ValidateResult]
    bench: Callable[..., BenchResult]
    audit: Callable[..., Any]


def _supported(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` accepts (the bench/audit signatures are still settling)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def real_evidence(runner: Any = None, allow_torch_ops: tuple[str, ...] = ()) -> EvidenceFns:
    """The engine's validate, bench and audit, sharing ``runner`` (default: the process-wide one).

    ``allow_torch_ops``: torch ops the candidate may use for real work (e.g. ``mm`` for cuBLAS GEMMs), passed to
    every check that judges it (the validation, the bench's record of its timed calls and the audit's correctness
    runs)."""

    def validate(*, reference: str, candidate: str, inputs: str | None) -> ValidateResult:
        from mcp_server.engine.validate import validate as run

        return run(reference, candidate, inputs=inputs, runner=runner, allow_torch_ops=allow_torch_ops)

    def bench(
        *,
        reference: str,
        candidate: str,
        inputs: str | None,
        validation: ValidateResult | None = None,
        extra_candidates: dict[str, ExtraCandidate] | None = None,
    ) -> BenchResult:
        try:
            from mcp_server.engine.bench import bench as run
            from mcp_server.engine.bench import validation_checks
        except ImportError as exc:
            raise EnvironmentUnavailable(f"bench is not available in this installation ({exc})") from None
        # The ledger has just validated this very file (and the baseline passed its own validation): no repeat.
        options: dict[str, Any] = {
            "inputs": inputs,
            "runner": runner,
            "validate_first": False,
            "allow_torch_ops": allow_torch_ops,
        }
        if validation is not None:
            options |= validation_checks(validation)
        if extra_candidates:
            options["extra_candidates"] = extra_candidates
        return run(candidate, reference, **_supported(run, options))

    def audit(*, reference: str, candidate: str, inputs: str | None) -> Any:
        try:
            from mcp_server.engine.audit import audit as run  # type: ignore[attr-defined]
        except ImportError as exc:
            raise AuditUnavailable(f"the audit tool is not available in this installation ({exc})") from None
        options = {"reference": reference, "inputs": inputs, "runner": runner, "allow_torch_ops": allow_torch_ops}
        return run(candidate, **_supported(run, options))

    return EvidenceFns(validate=validate, bench=bench, audit=audit)

"""The stage ledger: each conversion advances a stage only when the tools' own results show the gate is met.

A conversion (a PyTorch reference to convert) has a ledger of attempts in ``.ptt/ledger.db``. ``submit`` runs
what the stage's gate needs, evaluates the gate on those results and records both; nothing else can mark a
stage passed. Gate rules: :mod:`mcp_server.engine.stages.gates`. The file: :mod:`.ledger`.

Usage::

    start("softmax", "ref.py:softmax")
    r = submit("softmax", "stage1.py:softmax", stage=1)   # validates, records, r.verdict says why
    status().conversions[0].next_step
    best("softmax", stage=1).source                         # roll back
"""

from mcp_server.engine.stages.api import best, show, start, status, submit
from mcp_server.engine.stages.evidence import AuditUnavailable, EvidenceFns, real_evidence
from mcp_server.engine.stages.gates import (
    MIN_CASE_RATIO,
    MIN_GEOMEAN_GAIN,
    MIN_VS_COMPILE,
    autotune_info,
    evaluate,
    summarize_audit,
)
from mcp_server.engine.stages.ledger import LEDGER_ENV, MIGRATIONS, SCHEMA_VERSION, Ledger, ledger_path
from mcp_server.engine.stages.models import (
    AttemptSummary,
    AuditSummary,
    AutotuneInfo,
    BestAttempt,
    CaseSpeed,
    ConversionDetail,
    ConversionStatus,
    GateCheck,
    GateEvidence,
    GateVerdict,
    LedgerStatus,
    NextGate,
    SubmitResult,
)

__all__ = [
    "LEDGER_ENV",
    "MIGRATIONS",
    "MIN_CASE_RATIO",
    "MIN_GEOMEAN_GAIN",
    "MIN_VS_COMPILE",
    "SCHEMA_VERSION",
    "AttemptSummary",
    "AuditSummary",
    "AuditUnavailable",
    "AutotuneInfo",
    "BestAttempt",
    "CaseSpeed",
    "ConversionDetail",
    "ConversionStatus",
    "EvidenceFns",
    "GateCheck",
    "GateEvidence",
    "GateVerdict",
    "Ledger",
    "LedgerStatus",
    "NextGate",
    "SubmitResult",
    "autotune_info",
    "best",
    "evaluate",
    "ledger_path",
    "real_evidence",
    "show",
    "start",
    "status",
    "submit",
    "summarize_audit",
]

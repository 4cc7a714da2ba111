"""Errors that are the caller's to fix (exit 2) or the environment's (exit 3), as opposed to kernel failures.

A kernel that fails is data (``ok=False`` with findings); these exceptions are for misuse of the tools.
Their messages are one paragraph that names the fix, and are shown as they are by the CLI and the server.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: a missing file, a wrong ``path.py:name``, a syntax error, wrong shapes, a broken reference."""


class EnvironmentUnavailable(Exception):
    """This machine cannot do it (e.g. bench without a CUDA GPU)."""

"""Process isolation for user code: a fork server with torch/triton preloaded, one child per job."""

from mcp_server.engine.runner.parent import DEFAULT_TIMEOUT_S, JobOutcome, Runner, RunnerError, shared_runner

__all__ = ["DEFAULT_TIMEOUT_S", "JobOutcome", "Runner", "RunnerError", "shared_runner"]

"""The results database of a batch evaluation (SQLite, WAL): one row per problem, written as each pair ends.

A rerun reuses a row only when the problem file, the solution file and the settings are the ones it was
made from (content hashes and the settings key), and the pair did not end in an error of the machinery
(status ``error``); anything else is evaluated again. A run that was killed
loses only the pairs in flight.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from mcp_server.engine.errors import UsageError
from mcp_server.engine.evaluate.models import PairResult, PairSpec

SCHEMA_VERSION = 1
DEFAULT_DB_NAME = ".ptt-eval.db"


class ResultStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS results ("
                " name TEXT PRIMARY KEY, problem_sha TEXT NOT NULL, solution_sha TEXT, settings_key TEXT NOT NULL,"
                " status TEXT NOT NULL, finished_at TEXT NOT NULL, result_json TEXT NOT NULL)"
            )
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise UsageError(
                    f"{self.path} was written by a newer ptt (schema {row[0]}); use a newer ptt or another --db."
                )
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{self.path} is not a ptt eval database ({exc}); pass another --db.") from None

    def reusable(self, pair: PairSpec, settings_key: str) -> PairResult | None:
        """The stored result for this pair if it was made from the same files and settings."""
        with self._lock:
            row = self._db.execute(
                "SELECT problem_sha, solution_sha, settings_key, result_json FROM results WHERE name = ?", (pair.name,)
            ).fetchone()
        if row is None or (row[0], row[1], row[2]) != (pair.problem_sha, pair.solution_sha, settings_key):
            return None
        try:
            result = PairResult.model_validate_json(row[3])
        except ValueError:
            return None
        # An error is this machine's (a broken problem, a worker that died): worth another try.
        return None if result.status == "error" else result

    def put(self, result: PairResult) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    result.name,
                    result.problem_sha,
                    result.solution_sha,
                    result.settings_key,
                    result.status,
                    result.finished_at,
                    result.model_dump_json(),
                ),
            )

    def all(self) -> list[PairResult]:
        with self._lock:
            rows = self._db.execute("SELECT result_json FROM results ORDER BY name").fetchall()
        return [PairResult.model_validate_json(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

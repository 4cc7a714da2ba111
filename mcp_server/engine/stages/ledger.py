"""The ledger file: an embedded SQLite database, one per project (``.ptt/ledger.db`` by default).

Why SQLite: one file beside the user's code, transactions that survive a killed process, and several
writers (two agents, an agent and a person) without a server. Settings and why:

- WAL journal: readers never block the writer, and a process killed mid-transaction leaves only
  uncommitted frames in the WAL, which the next opener ignores.
- ``busy_timeout`` 30 s, and every write is one ``BEGIN IMMEDIATE`` transaction that takes the write lock
  up front, so two writers queue instead of failing with "database is locked". Evidence (validation, bench,
  audit) is collected *before* the transaction: the lock is held for milliseconds.
- ``foreign_keys`` on: an attempt cannot point at a conversion that does not exist.
- ``PRAGMA application_id`` marks the file as a ptt ledger and ``PRAGMA user_version`` is its schema
  version. A file that is not SQLite, or is another application's database, is refused with a
  :class:`UsageError` and left untouched; a schema newer than this code knows is refused too.

Migrations are ordered and each runs in its own transaction that also bumps ``user_version``, so an
interrupted upgrade leaves the previous version intact. Never edit a released migration: add one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.engine.specs import looked_up

APPLICATION_ID = 0x7074746C  # "pttl": marks the file as a ptt ledger
LEDGER_ENV = "PTT_LEDGER"
DEFAULT_LEDGER = Path(".ptt") / "ledger.db"
BUSY_TIMEOUT_MS = 30_000  # a writer holds the lock for milliseconds; 30 s means something is stuck
BEGIN_TRIES = 3
SQLITE_MAGIC = b"SQLite format 3\x00"

# (version, what it does, statements). Statements run in one transaction with the version bump.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "conversions and their attempts",
        (
            """CREATE TABLE conversion (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL UNIQUE,
                reference TEXT NOT NULL,
                inputs TEXT,
                notes TEXT NOT NULL DEFAULT '',
                created_at TEXT NOT NULL
            )""",
            """CREATE TABLE attempt (
                id INTEGER PRIMARY KEY,
                conversion_id INTEGER NOT NULL REFERENCES conversion(id) ON DELETE CASCADE,
                number INTEGER NOT NULL,
                stage INTEGER NOT NULL CHECK (stage IN (1, 2, 3)),
                candidate TEXT NOT NULL,
                source TEXT NOT NULL,
                source_sha256 TEXT NOT NULL,
                no_autotune_reason TEXT,
                autotune_json TEXT,
                device TEXT NOT NULL,
                validate_json TEXT,
                bench_json TEXT,
                audit_json TEXT,
                unavailable_json TEXT NOT NULL DEFAULT '{}',
                verdict TEXT NOT NULL CHECK (verdict IN ('passed', 'failed', 'pending')),
                gate_json TEXT NOT NULL,
                submitted_at TEXT NOT NULL,
                finished_at TEXT NOT NULL,
                UNIQUE (conversion_id, number)
            )""",
        ),
    ),
    (
        2,
        "the stage-1 baseline timed beside a stage-2/3 attempt; index attempts by stage and verdict",
        (
            "ALTER TABLE attempt ADD COLUMN baseline_attempt_id INTEGER REFERENCES attempt(id)",
            "ALTER TABLE attempt ADD COLUMN baseline_bench_json TEXT",
            "CREATE INDEX attempt_by_stage ON attempt (conversion_id, stage, verdict)",
        ),
    ),
    (
        3,
        "the torch ops an attempt was allowed to use for real work",
        ("ALTER TABLE attempt ADD COLUMN allow_torch_ops TEXT NOT NULL DEFAULT ''",),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def ledger_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The ledger file: ``path``, else ``$PTT_LEDGER``, else ``.ptt/ledger.db`` in the working folder."""
    chosen = path or os.environ.get(LEDGER_ENV) or DEFAULT_LEDGER
    return Path(os.path.expanduser(chosen)).absolute()


def ledger_exists(path: Path) -> bool:
    """Whether something is at the ledger's path (a UsageError where the path cannot be looked up at all)."""
    return looked_up(path, "The stage ledger", f"Pass a file path with --ledger / ${LEDGER_ENV}.")[1] != "missing"


def _fix_hint(path: Path) -> str:
    return (
        f"Move it aside (mv {path} {path}.bad) and run `ptt stages start` again to begin a new ledger, or point "
        f"--ledger / ${LEDGER_ENV} at another file. ptt never overwrites it."
    )


def _corrupt(path: Path, detail: str) -> UsageError:
    return UsageError(f"The stage ledger {path} is not a readable ptt ledger: {detail}. {_fix_hint(path)}")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class Ledger:
    """An open ledger. Use as a context manager; every method is one transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = path
        self.conn = conn
        conn.row_factory = sqlite3.Row

    # --- opening ----------------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> Ledger:
        """Open (creating it and its folder if needed) and migrate to :data:`SCHEMA_VERSION`."""
        p = ledger_path(path)
        _, kind = looked_up(p, "The stage ledger", f"Pass a file path with --ledger / ${LEDGER_ENV}.")
        if kind != "missing":  # ledger_exists, with what is there
            if kind == "dir":
                raise UsageError(f"The stage ledger {p} is a folder. Pass a file path with --ledger / ${LEDGER_ENV}.")
            if kind == "other":
                raise UsageError(
                    f"The stage ledger {p} is not a regular file (a pipe or a device). Pass a file path with --ledger "
                    f"/ ${LEDGER_ENV}."
                )
            with p.open("rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
            if head and head != SQLITE_MAGIC:
                raise _corrupt(p, "it is not a SQLite database (corrupt, or some other file)")
        else:
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"Cannot create the folder for the stage ledger {p}: {exc.strerror}.") from None
        try:
            conn = sqlite3.connect(p, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise UsageError(f"Cannot open the stage ledger {p}: {exc}. {_fix_hint(p)}") from None
        ledger = cls(p, conn)
        try:
            ledger._prepare()
        except BaseException:
            conn.close()
            raise
        return ledger

    def _prepare(self) -> None:
        c = self.conn
        with self._sqlite_errors():
            c.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            c.execute("PRAGMA foreign_keys = ON")
            # Identify before changing anything: journal_mode=WAL would rewrite a foreign file's header.
            self._check_identity(*self._identity())
            c.execute("PRAGMA journal_mode = WAL")
            if self._identity()[1] < SCHEMA_VERSION:
                self._migrate()

    def _identity(self) -> tuple[int, int, list[str]]:
        c = self.conn
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        version = c.execute("PRAGMA user_version").fetchone()[0]
        tables = [
            r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        ]
        return app_id, version, tables

    def _check_identity(self, app_id: int, version: int, tables: list[str]) -> None:
        fresh = app_id == 0 and version == 0 and not tables
        if app_id != APPLICATION_ID and not fresh:
            listing = ", ".join(sorted(tables)[:8]) or "none"
            raise UsageError(
                f"The stage ledger {self.path} is a SQLite database of another application "
                f"(application_id {app_id:#x}, tables: {listing}), not a ptt ledger; it was left untouched. "
                f"Point --ledger / ${LEDGER_ENV} at another file (the default is {DEFAULT_LEDGER} in the project)."
            )
        if version > SCHEMA_VERSION:
            raise UsageError(
                f"The stage ledger {self.path} has schema version {version}, newer than this ptt knows "
                f"({SCHEMA_VERSION}): a newer pytorch-to-triton wrote it. Upgrade pytorch-to-triton "
                f"(pip install -U pytorch-to-triton), or point --ledger / ${LEDGER_ENV} at another file."
            )

    def _migrate(self) -> None:
        with self.transaction():
            # Re-read under the write lock: another process may have migrated since we looked.
            app_id, version, tables = self._identity()
            self._check_identity(app_id, version, tables)
            for number, _what, statements in MIGRATIONS:
                if number <= version:
                    continue
                for statement in statements:
                    self.conn.execute(statement)
                self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self.conn.execute(f"PRAGMA user_version = {number}")

    @property
    def schema_version(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    # --- transactions -------------------------------------------------------------------------------------

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise EnvironmentUnavailable(
                    f"The stage ledger {self.path} stayed locked by another process for "
                    f"{BUSY_TIMEOUT_MS // 1000} s ({exc}). Is a ptt process stuck? Try again when it ends."
                ) from None
            raise _corrupt(self.path, str(exc)) from None
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            raise _corrupt(self.path, str(exc)) from None

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: BEGIN IMMEDIATE (takes the write lock up front) or a read snapshot."""
        c = self.conn
        with self._sqlite_errors():
            for attempt in range(BEGIN_TRIES):
                try:
                    c.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    break
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc) or attempt == BEGIN_TRIES - 1:
                        raise
            try:
                yield c
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
            else:
                c.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- data ---------------------------------------------------------------------------------------------

    def conversion(self, name: str) -> sqlite3.Row | None:
        with self.transaction(write=False) as c:
            return c.execute("SELECT * FROM conversion WHERE name = ?", (name,)).fetchone()

    def conversions(self) -> list[sqlite3.Row]:
        with self.transaction(write=False) as c:
            return c.execute("SELECT * FROM conversion ORDER BY created_at, id").fetchall()

    def add_conversion(self, name: str, reference: str, inputs: str | None, notes: str) -> tuple[sqlite3.Row, bool]:
        """Insert the conversion unless one of that name exists; returns (row, created)."""
        with self.transaction() as c:
            row = c.execute("SELECT * FROM conversion WHERE name = ?", (name,)).fetchone()
            if row is not None:
                return row, False
            c.execute(
                "INSERT INTO conversion (name, reference, inputs, notes, created_at) VALUES (?, ?, ?, ?, ?)",
                (name, reference, inputs, notes, now()),
            )
            return c.execute("SELECT * FROM conversion WHERE name = ?", (name,)).fetchone(), True

    def attempts(self, conversion_id: int, stage: int | None = None) -> list[sqlite3.Row]:
        sql = "SELECT * FROM attempt WHERE conversion_id = ?"
        params: tuple[Any, ...] = (conversion_id,)
        if stage is not None:
            sql += " AND stage = ?"
            params += (stage,)
        with self.transaction(write=False) as c:
            return c.execute(sql + " ORDER BY number", params).fetchall()

    def attempt_number(self, attempt_id: int) -> int | None:
        with self.transaction(write=False) as c:
            row = c.execute("SELECT number FROM attempt WHERE id = ?", (attempt_id,)).fetchone()
            return row[0] if row else None

    @staticmethod
    def insert_attempt(c: sqlite3.Connection, conversion_id: int, fields: dict[str, Any]) -> int:
        """Insert inside an open write transaction; returns the attempt's number (1, 2, … per conversion)."""
        number = c.execute(
            "SELECT COALESCE(MAX(number), 0) + 1 FROM attempt WHERE conversion_id = ?", (conversion_id,)
        ).fetchone()[0]
        row = {"conversion_id": conversion_id, "number": number, **fields}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        c.execute(f"INSERT INTO attempt ({cols}) VALUES ({marks})", tuple(row.values()))
        return number

    def add_attempt(self, conversion_id: int, fields: dict[str, Any]) -> int:
        with self.transaction() as c:
            return self.insert_attempt(c, conversion_id, fields)

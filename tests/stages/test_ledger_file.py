"""The ledger file: migrations, refusal of corrupt, foreign and newer files, concurrent writers, kill -9."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import sqlite3
from pathlib import Path

import pytest
import stages_workers
from stages_fakes import REFERENCE, FakeTools

from mcp_server.engine.errors import UsageError
from mcp_server.engine.stages import MIGRATIONS, SCHEMA_VERSION, Ledger, show, start, status, submit
from mcp_server.engine.stages.ledger import APPLICATION_ID

V1_GATE = '{"stage": 1, "state": "passed", "checks": [], "reasons": []}'


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_v1(path: Path) -> None:
    """A ledger as version 1 of the code wrote it, with one passing stage-1 attempt."""
    conn = sqlite3.connect(path)
    for statement in MIGRATIONS[0][2]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO conversion (name, reference, inputs, notes, created_at) VALUES (?, ?, NULL, '', ?)",
        ("old", REFERENCE, "2026-01-01T00:00:00+00:00"),
    )
    conn.execute(
        "INSERT INTO attempt (conversion_id, number, stage, candidate, source, source_sha256, device, verdict, "
        "gate_json, submitted_at, finished_at) VALUES (1, 1, 1, '/old/k.py:candidate', 'x = 1', ?, "
        "'NVIDIA H100', 'passed', ?, '2026-01-01', '2026-01-01')",
        ("a" * 64, V1_GATE),
    )
    conn.commit()
    conn.close()


# --- schema and migrations -------------------------------------------------------------------------------------


def test_migrations_are_numbered_in_order_from_one():
    assert [m[0] for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 2


def test_a_new_ledger_is_created_with_its_folder_in_wal_mode_at_the_latest_schema(db):
    with Ledger.open(db) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        assert ledger.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert ledger.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert ledger.conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
        assert ledger.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_a_version_1_ledger_is_upgraded_in_place_and_keeps_its_rows(db):
    db.parent.mkdir(parents=True)
    make_v1(db)
    with Ledger.open(db) as ledger:
        assert ledger.schema_version == SCHEMA_VERSION
        columns = {r[1] for r in ledger.conn.execute("PRAGMA table_info(attempt)")}
        indexes = {r[1] for r in ledger.conn.execute("PRAGMA index_list(attempt)")}
    assert {"baseline_attempt_id", "baseline_bench_json"} <= columns and "attempt_by_stage" in indexes
    detail = show("old", ledger=db)
    assert detail.conversion.stage_reached == 1 and detail.attempts[0].device == "NVIDIA H100"


def test_foreign_keys_reject_an_attempt_of_no_conversion(db):
    with Ledger.open(db) as ledger, pytest.raises(sqlite3.IntegrityError):
        ledger.conn.execute(
            "INSERT INTO attempt (conversion_id, number, stage, candidate, source, source_sha256, device, "
            "verdict, gate_json, submitted_at, finished_at) VALUES (99, 1, 1, 'c', 's', 'h', 'd', 'passed', "
            "'{}', 't', 't')"
        )


# --- files that are not ours -----------------------------------------------------------------------------------


def test_a_text_file_is_refused_with_its_path_and_the_fix_and_left_untouched(db):
    db.parent.mkdir(parents=True)
    db.write_text("my notes, not a database\n")
    before = digest(db)
    with pytest.raises(UsageError) as err:
        status(ledger=db)
    text = str(err.value)
    assert str(db) in text and "not a SQLite database" in text and "mv " in text and "--ledger" in text
    assert digest(db) == before


def test_a_damaged_sqlite_file_is_refused_not_rebuilt(db):
    db.parent.mkdir(parents=True)
    start("one", REFERENCE, ledger=db)
    data = bytearray(db.read_bytes())
    page = data[16] << 8 | data[17]  # page size from the header
    data[page : page * 3] = os.urandom(page * 2)  # the tables' pages; sqlite_master on page 1 survives
    db.write_bytes(bytes(data))
    before = digest(db)
    with pytest.raises(UsageError) as err:
        status(ledger=db)
    assert str(db) in str(err.value) and "not a readable ptt ledger" in str(err.value)
    assert digest(db) == before


def test_another_applications_sqlite_database_is_refused_and_left_untouched(db):
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(UsageError) as err:
        start("one", REFERENCE, ledger=db)
    assert "another application" in str(err.value) and "users" in str(err.value) and str(db) in str(err.value)
    assert digest(db) == before
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL
    conn.close()


def test_a_ledger_from_a_newer_ptt_is_refused_with_the_upgrade_to_make(db):
    Ledger.open(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    with pytest.raises(UsageError) as err:
        Ledger.open(db)
    assert f"schema version {SCHEMA_VERSION + 5}" in str(err.value) and "Upgrade pytorch-to-triton" in str(err.value)


def test_a_folder_in_place_of_the_ledger_is_refused(db):
    db.mkdir(parents=True)
    with pytest.raises(UsageError, match="is a folder"):
        Ledger.open(db)


# --- two writers, and a writer killed mid-transaction ---------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_submitting_at_once_lose_no_attempt(db, write):
    start("busy", REFERENCE, ledger=db)
    candidates = [write("a.py"), write("b.py")]
    count = 25
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=stages_workers.submit_many, args=(str(db), "busy", c, count, barrier, results))
        for c in candidates
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(o[0] == "ok" for o in outcomes), [o[2] for o in outcomes if o[0] != "ok"]
    attempts = show("busy", ledger=db).attempts
    assert [a.number for a in attempts] == list(range(1, 2 * count + 1))
    for c in candidates:
        assert sum(a.candidate == c for a in attempts) == count
    numbers = sorted(n for o in outcomes for n in o[2])
    assert numbers == list(range(1, 2 * count + 1))  # every writer got the number it was recorded under


def test_a_writer_killed_before_commit_leaves_a_consistent_ledger_without_its_attempt(db, write):
    start("killed", REFERENCE, ledger=db)
    submit("killed", write("first.py"), 1, ledger=db, evidence=FakeTools().fns())
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=stages_workers.write_and_hang, args=(str(db), "killed", 8 << 20, ready))
    child.start()
    try:
        assert ready.wait(timeout=120), "the writer never reached its open transaction"
        wal = Path(f"{db}-wal")
        assert wal.exists() and wal.stat().st_size > (4 << 20)  # uncommitted pages really reached the disk
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    with Ledger.open(db) as ledger:
        assert ledger.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [a.candidate.rpartition("/")[2] for a in show("killed", ledger=db).attempts] == ["first.py:candidate"]
    after = submit("killed", write("second.py"), 1, ledger=db, evidence=FakeTools().fns())
    assert after.attempt == 2 and after.ok  # the dead writer's lock is gone

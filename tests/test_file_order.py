"""`make test` hands files to its workers longest first (tests/file_order.py)."""

from __future__ import annotations

import json
from pathlib import Path

from file_order import DEFAULT_TEST_S, DURATIONS_FILE, file_of, longest_files_first, merge_durations, recorded_durations

ROOT = Path(__file__).resolve().parents[1]


def test_files_go_longest_first_and_keep_their_tests_in_order():
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3"]
    order = [ids[i] for i in longest_files_first(ids, {"a.py": 1.0, "b.py": 30.0, "c.py": 5.0})]
    assert order == ["b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3", "a.py::t1", "a.py::t2"]


def test_a_file_missing_from_the_table_weighs_its_number_of_tests():
    ids = [f"new.py::t{i}" for i in range(20)] + ["old.py::t1", "tiny.py::t1"]
    weights = {"old.py": 20 * DEFAULT_TEST_S - 0.1, "tiny.py": 0.0}
    order = [ids[i] for i in longest_files_first(ids, weights)]
    assert order[0] == "new.py::t0" and order[20:] == ["old.py::t1", "tiny.py::t1"]
    # Equal weights keep collection order.
    assert longest_files_first(["x.py::a", "y.py::a"], {}) == [0, 1]


def test_a_missing_or_malformed_table_is_empty(tmp_path: Path):
    assert recorded_durations(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert recorded_durations(tmp_path / "bad.json") == {}
    (tmp_path / "good.json").write_text(json.dumps({"tests/x.py": 3}))
    assert recorded_durations(tmp_path / "good.json") == {"tests/x.py": 3.0}


def test_a_run_updates_its_files_keeps_the_others_and_drops_the_gone(tmp_path: Path):
    for name in ("kept.py", "updated.py"):
        (tmp_path / name).write_text("")
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"kept.py": 4.0, "updated.py": 1.0, "gone.py": 9.0}))
    merge_durations(table, {"updated.py": 2.345}, tmp_path)
    assert recorded_durations(table) == {"kept.py": 4.0, "updated.py": 2.3}


def test_the_committed_table_names_test_files_that_exist():
    table = recorded_durations(DURATIONS_FILE)
    assert table, "tests/file_durations.json is missing or empty"
    missing = [f for f in table if not (ROOT / f).is_file()]
    assert not missing, f"rerun `PTT_RECORD_DURATIONS=1 make test`: {missing} no longer exist"


def test_this_sessions_collection_runs_files_in_that_order(request):
    ids = [item.nodeid for item in request.session.items]
    table = recorded_durations(DURATIONS_FILE)
    assert [ids[i] for i in longest_files_first(ids, table)] == ids
    recorded = [f for f in dict.fromkeys(file_of(i) for i in ids) if f in table]
    if len(recorded) > 1:  # more than this file was collected: the longest recorded one leads them
        assert recorded[0] == max(recorded, key=table.__getitem__)

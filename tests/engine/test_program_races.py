"""Races between the programs of one launch, which the interpreter's one-after-another order hides.

Must fail: a sum accumulated with tl.load + tl.store (right in program order). Must pass: the same with
tl.atomic_add and a shared slot every program fills with the same value; a last-program reduction whose acq_rel
ticket orders the reads passes without a word, and with a relaxed ticket (nothing ordered, but atomics in the
launch) with a warning. The unit tests drive the tracker directly for each hazard and its twin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mcp_server.engine.interp import bounds, races
from mcp_server.engine.models import FindingKind, Severity
from mcp_server.engine.validate import validate

RACES = Path(__file__).resolve().parent.parent / "fixtures" / "validate" / "interp_only" / "races.py"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's race check (no GPU)")


def _validate(runner, name: str):
    return validate(f"{RACES}:reference", f"{RACES}:{name}", runner=runner, seeds=1, determinism=False, timeout_s=60)


def _races(result):
    return [f for f in result.findings if f.kind is FindingKind.program_race]


def test_a_sum_accumulated_with_load_and_store_across_programs_is_a_race_at_its_line(runner):
    result = _validate(runner, "candidate_accumulate")
    assert not result.ok
    assert not [f for f in result.findings if f.kind is FindingKind.mismatch]  # the values were right here
    race = _races(result)[0]
    assert race.severity is Severity.error and "read after write" in race.message and "`out_ptr`" in race.message
    assert race.where is not None and "tl.store(out_ptr, tl.load(out_ptr) + part)" in race.where.source_line


def test_atomics_and_a_slot_every_program_fills_with_the_same_value_pass_without_a_word(runner):
    result = _validate(runner, "candidate")
    assert result.ok and not _races(result), result.findings


def test_a_reduction_an_acq_rel_ticket_orders_passes_and_a_relaxed_ticket_gets_a_warning(runner):
    ordered = _validate(runner, "candidate_last_program")
    assert ordered.ok and not _races(ordered), ordered.findings
    relaxed = _validate(runner, "candidate_relaxed_ticket")
    assert relaxed.ok, relaxed.findings
    (race,) = _races(relaxed)
    assert race.severity is Severity.warning and "`parts_ptr`" in race.message and "atomics" in race.message


# --- the tracker itself ---------------------------------------------------------------------------------


@pytest.fixture
def launch():
    from triton.runtime.interpreter import interpreter_builder

    buf = torch.zeros(8)
    bounds.set_launch(["buf"], [buf], {})
    races.start_launch()
    races.take()
    interpreter_builder.set_grid_dim(4, 1, 1)

    def as_program(pid: int) -> np.ndarray:
        interpreter_builder.set_grid_idx(pid, 0, 0)
        return np.array([buf.data_ptr() + 4 * i for i in range(8)], dtype=np.uint64)

    yield as_program
    bounds.set_launch([], [], {})


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_each_hazard_is_named_and_its_twin_is_not(launch):
    ptrs = launch(0)
    zeros, ones = _bits([0.0] * 8), _bits([1.0] * 8)
    races.on_store(ptrs, None, 4, zeros, ones)  # program 0 stores every element
    ptrs = launch(1)
    races.on_store(ptrs, None, 4, ones, ones)  # program 1 stores the same bits: changes nothing
    assert races.take() == []
    races.on_store(ptrs, None, 4, ones, _bits([2.0] * 8))  # …and now other bits
    (race,) = races.take()
    assert race["kind"] == "write after write" and race["first"] == "(0, 0, 0)" and race["second"] == "(1, 0, 0)"


def test_a_read_then_another_programs_store_is_write_after_read(launch):
    mask = np.arange(8) == 3
    races.on_load(launch(2), mask, 4)
    races.on_store(launch(3), mask, 4, _bits([0.0] * 8), _bits([5.0] * 8))
    (race,) = races.take()
    assert race["kind"] == "write after read" and race["element"] == 3


def test_a_program_reading_its_own_store_an_atomics_element_and_a_new_launch_are_not_races(launch):
    ptrs = launch(0)
    races.on_store(ptrs, None, 4, _bits([0.0] * 8), _bits([1.0] * 8))
    races.on_load(ptrs, None, 4)  # its own store
    races.on_atomic(launch(1), np.arange(8) == 0, 4)
    races.on_load(launch(2), np.arange(8) == 0, 4)  # an element atomics own
    assert races.take() == []
    races.start_launch()  # launches are ordered: the earlier one's stores are not hazards
    races.on_load(launch(3), None, 4)
    assert races.take() == []


def test_a_release_after_a_store_and_an_acquire_before_the_read_order_the_pair(launch):
    flag = np.arange(8) == 7
    races.on_store(launch(0), np.arange(8) == 0, 4, _bits([0.0] * 8), _bits([1.0] * 8))
    races.on_atomic(launch(0), flag, 4, "release")
    races.on_atomic(launch(1), flag, 4, "acquire")
    races.on_load(launch(1), np.arange(8) == 0, 4)
    assert races.take() == []
    races.on_store(launch(2), np.arange(8) == 1, 4, _bits([0.0] * 8), _bits([1.0] * 8))
    races.on_atomic(launch(2), flag, 4, "relaxed")  # orders nothing
    races.on_atomic(launch(3), flag, 4, "acquire")
    races.on_load(launch(3), np.arange(8) == 1, 4)
    (race,) = races.take()
    assert race["kind"] == "read after write" and race["element"] == 1
    races.start_launch()
    races.on_store(launch(0), np.arange(8) == 2, 4, _bits([0.0] * 8), _bits([1.0] * 8))
    races.on_atomic(launch(0), flag, 4, "release")
    races.on_load(launch(1), np.arange(8) == 2, 4)  # released, but never acquired by the reader
    (race,) = races.take()
    assert race["kind"] == "read after write" and race["element"] == 2

"""jobs.trees' record of how a call nests its outputs, which validate compares between reference and candidate
(the end-to-end fixtures, one-element tuple, dict and pair-in-pair against their twins, are in test_validate.py)."""

from __future__ import annotations

import torch

from mcp_server.engine.jobs.trees import flatten_outputs, nesting_fields

T = torch.zeros(2)


def test_tuples_and_lists_nest_alike_and_every_other_shape_differs():
    key = lambda out: nesting_fields(flatten_outputs(out))["nesting"]
    assert key((T, T)) == key([T, T]) == "(·, ·)"
    assert key(T) == "·"
    others = [(T,), [T], {"a": T}, (T, (T,)), ((T, T),)]
    assert key(T) not in {key(o) for o in others}
    assert key((T, (T,))) != key((T, T)) and key({"a": T, "b": T}) != key({"a": T, "c": T})


def test_the_description_names_the_leaves_and_is_cut_where_long():
    fields = nesting_fields(flatten_outputs({"y": T, "n": None}))
    assert fields["described"] == "{'n': NoneType, 'y': tensor}"
    long = nesting_fields(flatten_outputs([T] * 3000))
    assert long["described"].endswith("…") and len(long["described"]) <= 161


def test_a_long_nesting_is_compared_by_a_digest_that_still_tells_them_apart():
    a, b = (nesting_fields(flatten_outputs(out))["nesting"] for out in ([T] * 3000, [T] * 3001))
    assert a.startswith("#") and len(a) == 17 and a != b
    assert nesting_fields(flatten_outputs(tuple([T] * 3000)))["nesting"] == a


def test_a_plain_list_has_no_nesting_to_report():
    assert nesting_fields([T, T]) == {}

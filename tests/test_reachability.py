"""`find_live` on hand-written plans: roots, list closure, sharing, placeholders, bad indices."""

from __future__ import annotations

import pytest

from emitter_filter.errors import ProgramFormatError
from emitter_filter.program.reachability import DataRef, DataSpace, KeepList, PlanRefs, find_live

C, M, E = DataSpace.CONSTANT, DataSpace.MUTABLE, DataSpace.EXTERNAL


def plan(num_values, roots, lists=None, data=None, name="forward"):
    return PlanRefs(
        name=name,
        num_values=num_values,
        roots=roots,
        list_items=lists or {},
        data_refs={i: DataRef(space, index) for i, (space, index) in (data or {}).items()},
    )


CASES = [
    pytest.param(
        [plan(4, [0, 3], data={1: (C, 1), 2: (C, 2)})],
        [(0, 3)],
        {C: set()},
        id="values_no_root_reaches_are_dead",
    ),
    pytest.param(
        [plan(4, [3], lists={3: [1, -1, 0]}, data={0: (C, 1), 1: (C, 2), 2: (C, 3)})],
        [(0, 1, 3)],
        {C: {1, 2}},
        id="list_items_are_live_and_minus_one_is_none",
    ),
    pytest.param(
        [plan(5, [4], lists={4: [3], 3: [2]}, data={2: (E, 0)})],
        [(2, 3, 4)],
        {E: {0}},
        id="nested_lists_are_closed_transitively",
    ),
    pytest.param(
        [
            plan(2, [0], data={0: (C, 1), 1: (C, 2)}, name="forward"),
            plan(2, [1], data={0: (C, 2), 1: (C, 3)}, name="other"),
        ],
        [(0,), (1,)],
        {C: {1, 3}},
        id="a_constant_is_live_if_any_plan_reaches_it",
    ),
    pytest.param(
        [plan(2, [0, 1], data={0: (C, 0), 1: (M, 0)})],
        [(0, 1)],
        {C: set(), M: set()},
        id="placeholder_entry_zero_is_never_counted",
    ),
    pytest.param(
        [plan(2, [1], data={0: (E, 0), 1: (E, 1)})],
        [(1,)],
        {E: {1}},
        id="external_entry_zero_is_real_data",
    ),
    pytest.param(
        [plan(3, [], data={0: (C, 1)})],
        [()],
        {C: set()},
        id="a_plan_without_roots_keeps_nothing",
    ),
]


@pytest.mark.parametrize("plans, live_values, live_data", CASES)
def test_find_live(plans, live_values, live_data):
    liveness = find_live(plans)
    assert list(liveness.live_values) == live_values
    for space, expected in live_data.items():
        assert liveness.live_data[space] == expected


@pytest.mark.parametrize(
    "plans",
    [
        pytest.param([plan(2, [2])], id="root_past_the_end"),
        pytest.param([plan(2, [1], lists={1: [5]})], id="list_item_past_the_end"),
        pytest.param([plan(2, [-2])], id="negative_root"),
    ],
)
def test_an_index_outside_values_is_a_format_error_naming_the_plan(plans):
    with pytest.raises(
        ProgramFormatError, match=r"plan 'forward': value index -?\d+ outside values \(len 2\)"
    ):
        find_live(plans)


def test_a_cycle_through_lists_terminates():
    liveness = find_live([plan(2, [0], lists={0: [1], 1: [0]})])
    assert liveness.live_values == ((0, 1),)


def test_keep_list_matches_fnmatch_patterns_case_sensitively_and_notes_the_unmatched():
    keep = KeepList(["metadata.*", "unused", "[ab]ias"])
    assert keep.matches(["linear.weight", "metadata.version"])
    assert not keep.matches(["Unused", "metadata"])
    assert keep.matches(["bias"])
    assert keep.unmatched() == ("unused",)


def test_an_empty_keep_list_matches_nothing():
    keep = KeepList([])
    assert not keep and not keep.matches(["anything"])

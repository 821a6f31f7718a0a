"""The parallel run's order (tests/helpers/order.py): groups first, no long test queued behind another."""

from __future__ import annotations

import pytest

from tests.helpers.order import parallel_order


class Item:
    """A collected test as the ordering sees it: a name and its markers."""

    def __init__(self, name: str, *marks: pytest.MarkDecorator) -> None:
        self.name = name
        self.marks = {m.mark.name: m.mark for m in marks}

    def get_closest_marker(self, name: str):
        return self.marks.get(name)

    def __repr__(self) -> str:
        return self.name


def names(items) -> list[str]:
    return [i.name for i in items]


def test_groups_come_first_then_each_long_test_longest_first_followed_by_two_short_ones():
    items = [Item("s1"), Item("slow1", pytest.mark.slow), Item("s2"), Item("g1", pytest.mark.xdist_group("vllm")),
             Item("recipe", pytest.mark.timeout(1500)), Item("s3"), Item("demo", pytest.mark.timeout(900)),
             Item("s4"), Item("s5"), Item("g2", pytest.mark.xdist_group("vllm")), Item("s6"), Item("s7")]
    assert names(parallel_order(items)) == ["g1", "g2", "recipe", "s1", "s2", "demo", "s3", "s4", "slow1", "s5", "s6",
                                            "s7"]


def test_every_test_is_kept_once_and_short_tests_keep_their_collection_order():
    items = [Item(f"s{i}") for i in range(5)] + [Item(f"l{i}", pytest.mark.slow) for i in range(4)]
    ordered = parallel_order(items)
    assert sorted(names(ordered)) == sorted(names(items))
    assert [n for n in names(ordered) if n.startswith("s")] == [f"s{i}" for i in range(5)]
    # more long tests than short ones: the long ones follow each other once the short ones are used up
    assert names(ordered) == ["l0", "s0", "s1", "l1", "s2", "s3", "l2", "s4", "l3"]

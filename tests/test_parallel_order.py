"""The parallel run's order (tests/helpers/order.py): long files first, none queued behind another."""

from __future__ import annotations

import pytest

from tests.helpers.order import parallel_order


class Item:
    """A collected test as the ordering sees it: a node id and its markers."""

    def __init__(self, nodeid: str, *marks: pytest.MarkDecorator) -> None:
        self.nodeid = nodeid
        self.marks = {m.mark.name: m.mark for m in marks}

    def get_closest_marker(self, name: str):
        return self.marks.get(name)

    def __repr__(self) -> str:
        return self.nodeid


def ids(items) -> list[str]:
    return [i.nodeid for i in items]


def test_long_files_go_first_longest_first_each_followed_by_two_short_files_and_a_file_stays_whole():
    items = [Item("a.py::t1"), Item("a.py::t2"), Item("engine.py::t[base]", pytest.mark.timeout(900)),
             Item("engine.py::t[spec]", pytest.mark.timeout(900)), Item("b.py::t"), Item("slow.py::t", pytest.mark.slow),
             Item("recipe.py::t", pytest.mark.timeout(1500)), Item("c.py::t"), Item("d.py::t"), Item("e.py::t")]
    assert ids(parallel_order(items)) == [
        "recipe.py::t", "a.py::t1", "a.py::t2", "b.py::t",
        "engine.py::t[base]", "engine.py::t[spec]", "c.py::t", "d.py::t",
        "slow.py::t", "e.py::t"]


def test_every_test_is_kept_once_in_its_files_collection_order():
    items = [Item(f"s{i}.py::t") for i in range(3)] + [Item("l.py::t2", pytest.mark.slow), Item("l.py::t1")]
    ordered = parallel_order(items)
    assert sorted(ids(ordered)) == sorted(ids(items))
    assert ids(ordered) == ["l.py::t2", "l.py::t1", "s0.py::t", "s1.py::t", "s2.py::t"]

"""The order the parallel run needs: shared-fixture groups first, then the longest tests, each
followed by short ones.

Under ``pytest -n 4 --dist loadgroup --no-loadscope-reorder`` (the README's command) every
worker holds the test it runs plus one or two queued behind it. The suite's time is at least
its longest test, so the long ones must start early, and no long test may be queued behind
another (a ten-minute recipe would hold a second one for ten minutes while other workers
idle): after each long test come two short ones, which are what a worker queues behind it. A
test is long when it declares its own time limit (``@pytest.mark.timeout(S)``, given to every
end-to-end test of minutes) or is marked ``slow``; the longest limit first. The groups
(``xdist_group``: the real-engine tests, whose session fixtures start vLLM or llama.cpp and
run their scenarios) each go to one worker, first. Sorting is stable and depends only on the
collection, so every worker computes the same order (xdist requires it).
"""

from __future__ import annotations

from typing import Any

SHORT_AFTER_EACH_LONG = 2


def expected_weight(item: Any) -> tuple[float, int]:
    """Larger first: the test's declared time limit in seconds, then whether it is ``slow``."""
    marker = item.get_closest_marker("timeout")
    limit_s = float(marker.args[0]) if marker is not None and marker.args else 0.0
    return (limit_s, 1 if item.get_closest_marker("slow") is not None else 0)


def parallel_order(items: list[Any]) -> list[Any]:
    """Groups, then each long test (longest first) followed by short ones, then the rest."""
    grouped = [i for i in items if i.get_closest_marker("xdist_group") is not None]
    rest = [i for i in items if i.get_closest_marker("xdist_group") is None]
    long = sorted((i for i in rest if expected_weight(i) > (0.0, 0)), key=expected_weight, reverse=True)
    short = [i for i in rest if expected_weight(i) == (0.0, 0)]
    ordered = list(grouped)
    for n, item in enumerate(long):
        ordered.append(item)
        ordered += short[n * SHORT_AFTER_EACH_LONG:(n + 1) * SHORT_AFTER_EACH_LONG]
    ordered += short[len(long) * SHORT_AFTER_EACH_LONG:]
    return ordered


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    items[:] = parallel_order(items)

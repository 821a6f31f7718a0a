"""The order the parallel run needs: the files with the longest tests first, each followed by
files of short ones.

Under ``pytest -n 4 --dist loadfile --no-loadscope-reorder`` (docs/ci.md) every test
file goes whole to one worker (its module and session fixtures -- a vLLM or llama.cpp server
and its scenarios, minutes each -- are then set up once, in pytest's own order), and a worker
holds the file it runs plus one or two queued behind it. The suite's time is at least its
longest file, so the long files must start first, and no long file may be queued behind
another (a ten-minute recipe would hold the next for ten minutes while other workers idle):
after each long file come two short ones. A file's weight is its longest test's: the time
limit the test declares (``@pytest.mark.timeout(S)``, given to every end-to-end test of
minutes), then the ``slow`` marker. Inside a file the collection order is kept. The order
depends only on the collection, so every worker computes the same (xdist requires it).
"""

from __future__ import annotations

from typing import Any

SHORT_FILES_AFTER_EACH_LONG = 2


def expected_weight(item: Any) -> tuple[float, int]:
    """Larger first: the test's declared time limit in seconds, then whether it is ``slow``."""
    marker = item.get_closest_marker("timeout")
    limit_s = float(marker.args[0]) if marker is not None and marker.args else 0.0
    return (limit_s, 1 if item.get_closest_marker("slow") is not None else 0)


def test_file(item: Any) -> str:
    return str(item.nodeid).split("::", 1)[0]


def parallel_order(items: list[Any]) -> list[Any]:
    """Files by their longest test, each long file followed by two short files, then the rest."""
    files: dict[str, list[Any]] = {}
    for item in items:
        files.setdefault(test_file(item), []).append(item)
    weight = {name: max(expected_weight(i) for i in its) for name, its in files.items()}
    long = sorted((f for f in files if weight[f] > (0.0, 0)), key=lambda f: weight[f], reverse=True)
    short = [f for f in files if weight[f] == (0.0, 0)]
    order: list[str] = []
    for n, name in enumerate(long):
        order.append(name)
        order += short[n * SHORT_FILES_AFTER_EACH_LONG:(n + 1) * SHORT_FILES_AFTER_EACH_LONG]
    order += short[len(long) * SHORT_FILES_AFTER_EACH_LONG:]
    return [item for name in order for item in files[name]]


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker (each orders alike); one process keeps pytest's order
        items[:] = parallel_order(items)

"""Suite-wide set-up. Locust monkey-patches the process with gevent on import; doing it
first, before any test module imports ssl/urllib, keeps the patching complete."""

import locust  # noqa: F401
import pytest

from tests.helpers.order import pytest_collection_modifyitems  # noqa: F401  (longest tests first: hook re-exported)
from tests.helpers.tiers import (  # noqa: F401  (CI tiers: hooks re-exported)
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
)
from tests.helpers.xdist_gevent import keep_xdist_on_real_threads

keep_xdist_on_real_threads()


@pytest.fixture(scope="session")
def early_recipes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The long documented recipes (tests/study/early.py): those whose tests are selected start
    with the suite in a one-process run; under xdist, together when a worker reaches their file."""
    from tests.study.documented import recipes
    from tests.study.early import EarlyRecipes

    table = recipes()
    selected = {m.args[0] for item in request.session.items for m in item.iter_markers("recipe")}
    in_xdist = hasattr(request.config, "workerinput")
    early = [] if in_xdist else [name for name in table if name in selected]
    recipes_ = EarlyRecipes(tmp_path_factory.mktemp("recipes"), table, early)
    yield recipes_
    recipes_.close()


@pytest.fixture(autouse=True)
def _start_recipes_early(request: pytest.FixtureRequest) -> None:
    """Every test's set-up moves the early recipes on (only when some are selected: the
    session fixture is not set up for a run without them)."""
    if _recipes_selected(request.session):
        request.getfixturevalue("early_recipes").tick()


def _recipes_selected(session: pytest.Session) -> bool:
    cached = getattr(session, "_tokenswarm_recipes_selected", None)
    if cached is None:
        cached = any(item.get_closest_marker("recipe") for item in session.items)
        session._tokenswarm_recipes_selected = cached  # type: ignore[attr-defined]
    return cached

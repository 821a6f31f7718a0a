"""Suite-wide set-up. Locust monkey-patches the process with gevent on import; doing it
first, before any test module imports ssl/urllib, keeps the patching complete."""

import locust  # noqa: F401

from tests.helpers.order import pytest_collection_modifyitems  # noqa: F401  (longest tests first: hook re-exported)
from tests.helpers.tiers import (  # noqa: F401  (CI tiers: hooks re-exported)
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
)
from tests.helpers.xdist_gevent import keep_xdist_on_real_threads

keep_xdist_on_real_threads()

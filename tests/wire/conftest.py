"""Fixtures of the wire tests."""

import pytest

from tokenswarm.wire import reader


@pytest.fixture
def hub_reader(monkeypatch):
    """Streams and heads read from the event loop (the default), whatever ``TOKENSWARM_READER`` the
    suite was started with: for the tests that specify the event-loop readers themselves."""
    monkeypatch.setattr(reader, "USE_HUB_READER", True)

"""Fixtures shared by the security tests."""

import pytest

from tokenswarm import redact


@pytest.fixture
def fresh_redaction_registry():
    """No secret registered before the test, none left after it (the registry is process-wide)."""
    redact.forget_all()
    yield
    redact.forget_all()

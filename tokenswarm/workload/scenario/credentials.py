"""Keeping credentials out of scenario files and run manifests.

A key written in a scenario would end up in git, logs and manifests, so a scenario may only
name the environment variable that holds it (``target.api_key_env``). This module holds the
patterns that recognise secret-looking field names, header names and values, the check that
rejects literal keys (:func:`_reject_literal_secrets`) and :func:`mask_headers`, which hides
secret header values wherever a resolved configuration is shown.
"""

from __future__ import annotations

import re
from typing import Any

from tokenswarm.redact import SECRET_HEADER as _SECRET_HEADER  # one definition of a secret header
from tokenswarm.workload.errors import ScenarioError

#: field names that would hold a literal secret; the key must come from ``api_key_env``
_SECRET_FIELDS = (
    "api_key",
    "apikey",
    "key",
    "token",
    "openai_api_key",
    "authorization",
    "password",
    "secret",
    "bearer",
    "access_token",
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_LIKE = re.compile(r"^(sk|pk|rk|hf|gsk|xai)[-_]|^[A-Za-z0-9_\-]{40,}$")


def mask_headers(headers: dict[str, str]) -> dict[str, str]:
    """Copy of ``headers`` with Authorization/API-key/token/cookie-like values replaced by ``***``."""
    return {k: ("***" if _SECRET_HEADER.search(k) else v) for k, v in headers.items()}


def _reject_literal_secrets(data: Any, prefix: str, file: str) -> None:
    """A key in the file would end up in git, logs and manifests: only its env var name is allowed."""
    sections = [("", data)]
    if isinstance(data, dict) and isinstance(data.get("target"), dict):
        sections.append(("target.", data["target"]))
    for pre, sec in sections:
        if not isinstance(sec, dict):
            continue
        for key in sec:
            if isinstance(key, str) and key.lower() in _SECRET_FIELDS:
                raise ScenarioError(
                    file,
                    f"{prefix}{pre}{key}",
                    "target.api_key_env: the NAME of an environment variable holding the key",
                    "***",
                    problem="a literal API key is not allowed in a scenario file",
                )

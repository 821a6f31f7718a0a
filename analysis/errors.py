"""Exceptions raised by the analysis package, each mapped to a CLI exit status.

Every message names the file (and where useful the line and field) that caused it, so a
user can fix the input without reading a traceback.
"""

from __future__ import annotations


class AnalysisError(Exception):
    """Base class. ``exit_code`` is what ``tokenswarm report/compare`` returns."""

    exit_code = 2


class RunInputError(AnalysisError):
    """A run directory is missing, truncated, malformed or of an unknown format version."""

    exit_code = 2


class NotComparableError(AnalysisError):
    """Two runs that cannot be compared (they did not send the same requests)."""

    exit_code = 2


class NoSuccessError(AnalysisError):
    """The run holds no successful (``outcome == "ok"``) request: nothing to measure."""

    exit_code = 3

    @classmethod
    def among(cls, where: object, outcomes: dict[str, int], records: int | None = None) -> NoSuccessError:
        """The error for a run at ``where`` whose ``records`` (default: all counted) had these outcomes."""
        n = sum(outcomes.values()) if records is None else records
        return cls(f"{where}: no successful request among {n} records (outcomes: {outcomes})")

"""What a run directory's records store is called and which one a run gets (no pyarrow).

Kept apart from :mod:`tokenswarm.collect.parquet_store` so that a run writing JSONL, the
analysis of a JSONL run and the end-of-run verdict never import pyarrow: it is ~0.2 s of
start-up CPU, paid by every generator process otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Version of the Parquet layout (file names, column types, metadata keys).
STORE_FORMAT_VERSION = 1
#: Glob of the parts in a run directory (reading order = name order).
PARTS_GLOB = "records-*.parquet"
#: Lines of batches that could not be stored as Parquet (read by ``tokenswarm export`` and the analysis).
REJECTED_NAME = "records-rejected.jsonl"
#: Planned runs at least this long are soak runs: ``--records-format auto`` stores them as Parquet.
SOAK_MIN_S = 3600.0


class StoreFormatError(ValueError):
    """A records part that this version cannot read; the message names the file."""


def store_parts(run_dir: str | os.PathLike[str]) -> tuple[list[Path], list[str]]:
    """Finished parts of a run directory in writing order, and warnings about unfinished ones."""
    d = Path(run_dir)
    parts = sorted(d.glob(PARTS_GLOB))
    warnings = [f"{p}: unfinished records part (the writer stopped mid-write); ignored"
                for p in sorted(d.glob(PARTS_GLOB + ".tmp"))]
    return parts, warnings


def choose_format(option: str, load: Any, jsonl_options: bool = False) -> str:
    """``parquet`` or ``jsonl`` for ``--records-format`` (``auto``, ``jsonl``, ``parquet``).

    ``auto`` picks Parquet for soak runs -- a scenario with live window summaries
    (``load.report_interval_s``) or one whose planned steps last ``SOAK_MIN_S`` or more -- unless
    a JSONL-only option (``--records-gzip``, ``--records-rotate-mb``) was given.
    """
    if option in ("jsonl", "parquet"):
        return option
    if option != "auto":
        raise ValueError(f"--records-format: {option!r} is not one of auto, jsonl, parquet")
    planned = len(getattr(load, "steps", ()) or ()) * (float(getattr(load, "warmup_s", 0) or 0)
                                                       + float(getattr(load, "step_duration_s", 0) or 0))
    soak = bool(getattr(load, "report_interval_s", None)) or planned >= SOAK_MIN_S
    return "parquet" if soak and not jsonl_options else "jsonl"

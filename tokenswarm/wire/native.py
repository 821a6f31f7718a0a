"""How the reader, the stream state and the live statistics find the C extension's functions.

The extension (:mod:`tokenswarm.wire._fastread`) is optional (``setup.py`` builds it when a
compiler is there), and ``TOKENSWARM_NATIVE=0`` turns it off to compare with, or test, the
Python paths. Whether it ran is in the manifest's timing provenance (``native_fast_path``).
The arrival watcher (:mod:`tokenswarm.wire.watch`) has its own switch.

Importing this module also hands :mod:`tokenswarm.redact` the extension's one-pass test of which
secret patterns may match a record line (``redact_gates``) and :mod:`tokenswarm.record` its
record builder (``build_record``): both sit below the wire and cannot import it, and every
process that writes records reads streams through this module.
"""

from __future__ import annotations

import os
from typing import Any

from tokenswarm import record, redact

try:  # built by setup.py; optional
    from tokenswarm.wire import _fastread
except ImportError:  # no compiler at install time: the Python paths do the same work
    _fastread = None

#: The C paths are used (the extension is built and TOKENSWARM_NATIVE is not "0").
ENABLED = _fastread is not None and os.environ.get("TOKENSWARM_NATIVE", "1") != "0"


def extension() -> Any:
    """The built extension, used or not (its counters count the watcher too), or None."""
    return _fastread


def native_function(name: str) -> Any:
    """The extension's ``name``, or None when the C paths are not used."""
    return getattr(_fastread, name, None) if ENABLED else None


_gates = native_function("redact_gates")
if _gates is not None:
    redact.use_gate_mask(_gates)
# and tokenswarm.record its C record builder, for the same reason
record.use_native_builder(native_function("bind_record"), native_function("build_record"))

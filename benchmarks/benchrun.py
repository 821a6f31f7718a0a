"""What the analysis benchmarks (``analysis_1m``, ``analysis_10m``) share: their command line,
a work directory kept (``--keep``) or removed, the records generated in a child process (so
the generator's memory is not counted in the analysis's peak RSS), and the CPU/RSS figures."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import resource
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator


def bench_args(description: str, records: int, *extra: tuple[str, dict[str, Any]]) -> argparse.Namespace:
    """``--records N``, ``--keep DIR``, ``--no-plots`` and the benchmark's ``extra`` options."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=records)
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    ap.add_argument("--keep", help="generate into / reuse this directory instead of a temp dir")
    ap.add_argument("--no-plots", action="store_true")
    return ap.parse_args()


@contextlib.contextmanager
def work_dir(keep: str | None, prefix: str) -> Iterator[Path]:
    """``keep`` (reused, left in place), or a new temporary directory removed afterwards."""
    tmp = Path(keep) if keep else Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def generate_in_child(target: Callable[..., Any], *args: Any) -> int:
    """Run ``target(*args)`` in a forked process; its exit code (0: generated)."""
    p = mp.get_context("fork").Process(target=target, args=args)
    p.start()
    p.join()
    return p.exitcode or 0


def cpu_s() -> float:
    """This process's CPU time (user + system), seconds."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB on Linux


def load_average() -> str:
    """The machine's 1-minute load average (the benchmarks share the machine)."""
    with open("/proc/loadavg") as fh:
        return fh.read().split()[0]

"""Distributed-run options of ``tokenswarm run``: the master's port and waiting for workers.

Checked before Locust starts, so a user sees one line that names the port and what to do,
not Locust's bind traceback or an endless "0 of 2 connected".
"""

from __future__ import annotations

import errno
import socket

from tokenswarm.wire.ports import free_port

#: Locust's default master port (``--master-bind-port`` / ``--master-port``).
DEFAULT_MASTER_PORT = 5557
#: How long a master started by ``tokenswarm run`` waits for its workers by default (seconds).
DEFAULT_WORKER_WAIT_S = 60


class PortInUse(ValueError):
    """The master's port is taken; the message says which and how to choose another."""


def option_value(argv: list[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in a Locust argument list (last one wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def is_master(argv: list[str], local_workers: int) -> bool:
    return local_workers > 0 or "--master" in argv


def master_port(argv: list[str]) -> int:
    raw = option_value(argv, "--master-bind-port")
    if raw is None:
        return DEFAULT_MASTER_PORT
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"--master-bind-port: {raw!r} is not a port number") from None


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`PortInUse` when ``host:port`` cannot be bound (another master, or any server)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise PortInUse(
                f"port {port} (the master's port for workers) is already in use on {host}; "
                f"stop what holds it or choose another with --master-bind-port N"
            ) from None


def distributed_argv(argv: list[str], local_workers: int) -> list[str]:
    """Locust options to add so that a distributed run starts (and fails) cleanly.

    * Local workers (``--processes``) dial ``--master-port``, which Locust does not derive from
      ``--master-bind-port``: with only the latter they dialled 5557 and the master waited forever.
    * Waiting for workers is bounded (``--expect-workers-max-wait``, default 60 s), after which
      Locust prints "Gave up waiting for workers to connect" and exits 1.
    """
    extra: list[str] = []
    if local_workers and option_value(argv, "--master-bind-port") is not None \
            and option_value(argv, "--master-port") is None:
        extra += ["--master-port", str(master_port(argv))]
    if is_master(argv, local_workers) and option_value(argv, "--expect-workers-max-wait") is None:
        extra += ["--expect-workers-max-wait", str(DEFAULT_WORKER_WAIT_S)]
    return extra


def preflight(argv: list[str], local_workers: int) -> list[str]:
    """Check the master's port and return the options to add; raises ValueError/PortInUse."""
    if not is_master(argv, local_workers):
        return []
    chosen: list[str] = []
    if local_workers and "--master" not in argv and option_value(argv, "--master-bind-port") is None:
        # only this run's own workers dial it: any free port does, where Locust's 5557 may be
        # another run's (two `--workers` runs on one machine, or parallel test workers)
        chosen = ["--master-bind-port", str(free_port())]
        argv = argv + chosen
    host = option_value(argv, "--master-bind-host") or "127.0.0.1"  # tokenswarm's default (orchestrate.exposure)
    check_port_free("" if host == "*" else host, master_port(argv))
    return chosen + distributed_argv(argv, local_workers)

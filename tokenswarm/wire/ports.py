"""A free TCP port of 127.0.0.1, for the servers and masters tokenswarm starts on this machine.

One function for the simulator, the study's arms, the test model's engines and local workers'
master. The port was free when asked; the caller binds it soon after (a race with another
process is possible and shows as "Address already in use" naming the port).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

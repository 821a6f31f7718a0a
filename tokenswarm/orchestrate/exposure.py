"""What a tokenswarm process opens on the network, and what it says about it.

Locust binds its web UI and its master port to every interface by default. tokenswarm's
plugin makes both 127.0.0.1 (:data:`LOCAL_BIND`) unless the command line, ``LOCUST_WEB_HOST`` /
``LOCUST_MASTER_BIND_HOST`` or a Locust config file says otherwise, and checks the choice:

* a web UI on another address without ``--web-login`` is a warning (whoever reaches it can
  start load with the target's credentials);
* a master port on another address without a worker token is refused: any process that
  reaches it would get the scenario's secrets and could write records.
"""

from __future__ import annotations

import ipaddress

#: the default bind address of the web UI and of the master's worker port
LOCAL_BIND = "127.0.0.1"


def is_loopback(host: str | None) -> bool:
    """Whether binding ``host`` keeps the port on this machine (``*``, ``""`` and ``0.0.0.0`` do not)."""
    h = (host or "").strip().strip("[]").lower()
    if h in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def web_ui_warning(web_host: str | None, web_login: bool, port: int | str | None) -> str | None:
    """The warning for a web UI reachable from other machines without a login, or None."""
    if web_login or is_loopback(web_host):
        return None
    where = "all interfaces" if web_host in (None, "", "*", "0.0.0.0", "::") else web_host
    return (f"tokenswarm: WARNING: the web UI listens on {where} (port {port}) without --web-login: anyone who "
            "can reach it can start load with the target's credentials and read the run. Add --web-login with "
            "TOKENSWARM_WEB_PASSWORD set, or bind 127.0.0.1 (the default) and use an SSH tunnel.")


def master_refusal(bind_host: str | None, token: str | None) -> str | None:
    """Why a master may not start (its worker port open to other machines, no token), or None."""
    if token or is_loopback(bind_host):
        return None
    where = "all interfaces" if bind_host in (None, "", "*", "0.0.0.0", "::") else bind_host
    return (f"the master's worker port would listen on {where} without a worker token: any process that reaches "
            "it would receive the scenario's credentials and could write records. Set TOKENSWARM_WORKER_TOKEN "
            "(the same secret on the master and every worker) or --worker-token, or bind 127.0.0.1 "
            "(--master-bind-host 127.0.0.1, the default)")

"""The master admits only workers that present the shared worker token.

Locust's ZeroMQ protocol has no authentication: any process that reaches the master's port and
says ``client_ready`` becomes a worker, gets the ``spawn`` message (the scenario with its header
secrets, the target URL with its password) and may send records. :class:`WorkerGate` sits in
front of Locust's message handler on the master:

1. A new connection's ``client_ready`` is answered with an ``ack`` (Locust's worker waits for
   it in its constructor, before tokenswarm's code runs) but is **held**: the connection is not
   in ``runner.clients``, so it gets no ``spawn``, no broadcast, and counts for no
   ``--expect-workers``.
2. tokenswarm's worker plugin then sends :data:`MSG_HELLO` with the token
   (``TOKENSWARM_WORKER_TOKEN`` or ``--worker-token``).
3. The right token admits the connection: the held ``client_ready`` goes to Locust now. A
   wrong or missing token refuses it: it gets :data:`MSG_REFUSED` (the reason) and ``quit``.

Every other message of a connection that was not admitted -- records, final batches, stats,
heartbeats -- is dropped and counted, and so is any message whose ``node_id`` is not the
connection it came on (a forged sender). An admitted worker's message that the master cannot
handle (malformed, or a handler that raised) is dropped and counted too, rather than ending
Locust's one listener. The refused connections and what was dropped from them are written to
the manifest (``workers_refused``). Without a token (a master bound to
127.0.0.1, see :mod:`tokenswarm.orchestrate.exposure`) every connection is admitted, as in Locust.

The token is compared in constant time and never logged; it travels in clear text (ZeroMQ
without CurveZMQ), so a master reached across an untrusted network belongs behind a VPN or
tunnel.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Callable
from typing import Any

from locust import __version__ as locust_version
from locust.rpc import Message as _LocustMessage

from tokenswarm.collect.relay import MSG_FINAL, MSG_RECORDS

log = logging.getLogger("tokenswarm")

MSG_HELLO = "tokenswarm_hello"
MSG_REFUSED = "tokenswarm_refused"
TOKEN_VAR = "TOKENSWARM_WORKER_TOKEN"
#: Locust's message class (untyped): ``Message(type, data, node_id)``
Message: Callable[[str, Any, str], Any] = _LocustMessage
#: messages that may come from a connection before it is admitted
_OPENING = frozenset({"client_ready", MSG_HELLO})
#: connections tracked by name; beyond this (a flood of fake identities) they are counted together
MAX_TRACKED = 1000
OTHERS = "(further connections)"
#: message types that carry records (counted separately in the manifest)
RECORD_TYPES = frozenset({MSG_RECORDS, MSG_FINAL})


def token_from(option: str | None) -> str | None:
    """The worker token: ``--worker-token``, else ``$TOKENSWARM_WORKER_TOKEN``; None if neither is set."""
    return (option or "").strip() or (os.environ.get(TOKEN_VAR) or "").strip() or None


class WorkerGate:
    """Admission of worker connections on a Locust master (see the module docstring)."""

    def __init__(self, runner: Any, token: str | None) -> None:
        self.runner = runner
        self.token = token
        self.admitted: set[str] = set()
        self.pending: dict[str, Any] = {}  # connection -> its held client_ready
        self.refused: dict[str, str] = {}  # connection -> reason
        self.dropped: dict[str, dict[str, int]] = {}  # connection -> {"messages": n, "record_batches": k}
        self.forged: dict[str, dict[str, int]] = {}  # admitted connection -> its messages with another id
        self.unreadable: dict[str, dict[str, int]] = {}  # admitted connection -> messages its handler failed on
        self._locust_handler: Callable[[str, Any], None] | None = None

    def install(self) -> WorkerGate:
        """Put the gate in front of ``runner.handle_message`` (Locust's listener calls it per message)."""
        if self._locust_handler is None:
            self._locust_handler = self.runner.handle_message
            self.runner.handle_message = self.handle_message
        return self

    # -- per message -------------------------------------------------------------------------
    def handle_message(self, client_id: str, msg: Any) -> None:
        assert self._locust_handler is not None
        if msg.node_id != client_id:
            self._drop(client_id, msg, f"forged sender {msg.node_id!r}",
                       into=self.forged if client_id in self.admitted else self.dropped)
            return
        if client_id in self.admitted:
            if msg.type == MSG_HELLO:
                return  # a worker's hello after a reconnect: nothing for Locust
            self._handle_admitted(client_id, msg)
            return
        if msg.type == "client_ready":
            if client_id in self.refused:
                self._send(MSG_REFUSED, self.refused[client_id], client_id)
                self._send("quit", None, client_id)
                return
            if self.token is None:
                self.admit(client_id, msg)
                return
            if len(self.pending) >= MAX_TRACKED:
                self._drop(client_id, msg, "too many connections waiting for their token")
                return
            self.pending[client_id] = msg
            self._send("ack", {}, client_id)  # no index: the worker gets its index when admitted
            return
        if msg.type == MSG_HELLO:
            self._hello(client_id, msg)
            return
        if msg.type == "locustfile" and self.token is None:
            self._locust_handler(client_id, msg)  # `--worker -f -` asks before client_ready; open master only
            return
        self._drop(client_id, msg, "not admitted")

    def _handle_admitted(self, client_id: str, msg: Any) -> None:
        """Locust's handler (and tokenswarm's, registered with it) for an admitted worker's message.

        Locust calls the handler from its one listener greenlet, which dies at the first exception:
        the master would then hear no worker again, and every record still to come would be lost.
        A message that cannot be handled (malformed, or a handler's bug) is dropped, logged with
        its sender and type, and counted in the manifest instead.
        """
        assert self._locust_handler is not None
        try:
            self._locust_handler(client_id, msg)
        except Exception as exc:
            self._drop(client_id, msg, f"the master could not handle it: {type(exc).__name__}: {exc}",
                       into=self.unreadable)
            log.debug("tokenswarm: %s from worker %s", msg.type, client_id, exc_info=True)

    def _hello(self, client_id: str, msg: Any) -> None:
        if self.token is None:
            self.admit(client_id, self.pending.pop(client_id, None))
            return
        given = msg.data.get("token") if isinstance(msg.data, dict) else None
        if isinstance(given, str) and hmac.compare_digest(given.encode(), self.token.encode()):
            self.admit(client_id, self.pending.pop(client_id, None))
            return
        self.refuse(client_id, "wrong worker token" if given else "no worker token (set TOKENSWARM_WORKER_TOKEN)")

    def admit(self, client_id: str, ready: Any | None) -> None:
        assert self._locust_handler is not None
        self.admitted.add(client_id)
        self.refused.pop(client_id, None)
        self.dropped.pop(client_id, None)  # its heartbeats before the hello: not a refusal
        self._locust_handler(client_id, ready or Message("client_ready", locust_version, client_id))

    def refuse(self, client_id: str, reason: str) -> None:
        self.pending.pop(client_id, None)
        if len(self.refused) < MAX_TRACKED:
            self.refused[client_id] = reason
        log.warning("tokenswarm: refused worker %s: %s", client_id, reason)
        self._send(MSG_REFUSED, reason, client_id)
        self._send("quit", None, client_id)

    def _drop(self, client_id: str, msg: Any, why: str, into: dict[str, dict[str, int]] | None = None) -> None:
        table = self.dropped if into is None else into
        if client_id not in table and len(table) >= MAX_TRACKED:
            client_id = OTHERS
        counts = table.setdefault(client_id, {"messages": 0, "record_batches": 0})
        counts["messages"] += 1
        if msg.type in RECORD_TYPES:
            counts["record_batches"] += 1
        if counts["messages"] == 1 or into is self.unreadable:
            log.warning("tokenswarm: dropped %s from worker %s (%s)", msg.type, client_id, why)

    def _send(self, msg_type: str, data: Any, client_id: str) -> None:
        try:
            self.runner.server.send_to_client(Message(msg_type, data, client_id))
        except Exception as exc:  # a connection that went away: nothing more to tell it
            log.debug("tokenswarm: could not send %s to %s: %s", msg_type, client_id, exc)

    # -- what the manifest says ----------------------------------------------------------------
    def refusals(self) -> list[dict[str, Any]]:
        """Every connection that was not admitted (refused, or never presented a token), with its drops."""
        names = [c for c in self.dropped if c not in self.admitted]
        names += [c for c in self.refused if c not in names]
        names += [c for c in self.pending if c not in names]
        out = []
        for c in names:
            counts = self.dropped.get(c, {"messages": 0, "record_batches": 0})
            reason = self.refused.get(c) or ("never presented the worker token" if c in self.pending
                                             else "sent messages without being admitted")
            out.append({"worker": c, "reason": reason, "messages_dropped": counts["messages"],
                        "record_batches_dropped": counts["record_batches"]})
        for c, counts in self.forged.items():  # an admitted connection that also sent forged messages
            out.append({"worker": c, "reason": "messages with another worker's id", "messages_dropped":
                        counts["messages"], "record_batches_dropped": counts["record_batches"]})
        for c, counts in self.unreadable.items():  # an admitted connection whose messages could not be handled
            out.append({"worker": c, "reason": "messages the master could not handle", "messages_dropped":
                        counts["messages"], "record_batches_dropped": counts["record_batches"]})
        return out


def send_hello(runner: Any, token: str | None) -> None:
    """Worker side: present the token to the master (right after Locust's connection is acked)."""
    runner.send_message(MSG_HELLO, {"token": token or ""})

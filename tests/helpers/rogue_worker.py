"""A fake Locust worker that speaks the master's ZeroMQ protocol without tokenswarm's plugin.

``rogue_worker.py PORT MODE OUT LIFETIME_S`` connects to the master on 127.0.0.1:PORT as
``rogue-MODE-<pid>``, says ``client_ready`` and then, depending on MODE:

* ``silent`` -- presents no token;
* ``wrong-token`` -- presents a wrong one.

Until LIFETIME_S has passed it keeps sending what a worker may send -- heartbeats,
record batches (one well-formed-looking record line each) and a final batch -- and ignores
``quit``. Every message it receives is appended to OUT as a JSON line ``{"type", "data"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import zmq
from locust import __version__
from locust.rpc.protocol import Message

RECORD = (b'{"run_id":"rogue","worker_id":"rogue","seq":0,"task":"qa","outcome":"ok",'
          b'"rogue_marker":"ROGUE-RECORD-LINE"}\n')


def main() -> None:
    port, mode, out, lifetime_s = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    ident = f"rogue-{mode}-{os.getpid()}"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, ident.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")

    def send(kind: str, data: object) -> None:
        sock.send(Message(kind, data, ident).serialize())

    send("client_ready", __version__)
    if mode == "wrong-token":
        send("tokenswarm_hello", {"token": "not-the-token"})
    deadline = time.monotonic() + lifetime_s
    seq = 0
    next_send = 0.0
    with open(out, "a") as fh:
        while time.monotonic() < deadline:
            if sock.poll(100):
                msg = Message.unserialize(sock.recv())
                fh.write(json.dumps({"type": msg.type, "data": msg.data}, default=str) + "\n")
                fh.flush()
            if time.monotonic() >= next_send:
                next_send = time.monotonic() + 0.3
                send("heartbeat", {"state": "running", "current_cpu_usage": 1, "current_memory_usage": 1})
                send("tokenswarm_records", {"worker_id": ident, "first_seq": seq, "last_seq": seq, "count": 1,
                                            "data": RECORD})
                seq += 1
    send("tokenswarm_final", {"worker_id": ident, "last_seq": seq - 1, "requests_started": seq})
    sock.close()
    ctx.term()


if __name__ == "__main__":
    main()

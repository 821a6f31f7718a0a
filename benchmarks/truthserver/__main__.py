"""Command line: ``python -m benchmarks.truthserver --port P --truth PATH [options]``.

Serves ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models`` on uvicorn (httptools
protocol, the stack vLLM runs on) until SIGINT/SIGTERM, then flushes the truth log. The loop is
asyncio's by default: its socket reads can keep the kernel's receive stamps, so ``received`` is
when a request arrived; ``--loop uvloop`` is vLLM's own loop, whose C reads drop them.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from benchmarks.truthserver.plan import IntRange, ServerOptions


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = ServerOptions()
    ap = argparse.ArgumentParser(prog="python -m benchmarks.truthserver", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--truth", metavar="PATH", help="append the ground-truth log (JSON lines) to this file")
    ap.add_argument("--model", default=d.model, help="model name served at /v1/models (default %(default)s)")
    ap.add_argument("--step-ms", type=float, default=d.step_ms,
                    help="time between content events, one decode step (default %(default)s)")
    ap.add_argument("--ttft-ms", type=float, default=d.ttft_ms,
                    help="from request received to the first content event (default %(default)s)")
    ap.add_argument("--prefill-us-per-token", type=float, default=d.prefill_us_per_token,
                    help="added to the TTFT per prompt token (default %(default)s)")
    ap.add_argument("--tokens-per-chunk", default=str(d.tokens_per_chunk), metavar="N|LO-HI",
                    help="tokens per content event, fixed or uniform in LO-HI (default %(default)s)")
    ap.add_argument("--natural-tokens", default=str(d.natural_tokens), metavar="N|LO-HI",
                    help="answer length without ignore_eos, capped by max_tokens (default %(default)s)")
    ap.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--loop", default="asyncio", choices=["auto", "uvloop", "asyncio"],
                    help="uvicorn's event loop (default %(default)s: kernel arrival stamps for 'received'; "
                         "uvloop: vLLM's loop, 'received' from the loop's read)")
    ap.add_argument("--access-log", action="store_true", help="uvicorn's access log (off by default)")
    return ap.parse_args(argv)


def options(args: argparse.Namespace) -> ServerOptions:
    """Server options from parsed arguments; ``ValueError`` names the bad one."""
    for name in ("step_ms", "ttft_ms", "prefill_us_per_token"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(args, name)}")
    if args.default_max_tokens < 1:
        raise ValueError(f"--default-max-tokens: must be >= 1, got {args.default_max_tokens}")
    return ServerOptions(model=args.model, step_ms=args.step_ms, ttft_ms=args.ttft_ms,
                         prefill_us_per_token=args.prefill_us_per_token,
                         tokens_per_chunk=IntRange.parse(args.tokens_per_chunk, "--tokens-per-chunk"),
                         natural_tokens=IntRange.parse(args.natural_tokens, "--natural-tokens"),
                         default_max_tokens=args.default_max_tokens, seed=args.seed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        opts = options(args)
    except ValueError as e:
        print(f"truthserver: {e}", file=sys.stderr)
        return 2
    if args.truth and not os.path.isdir(os.path.dirname(os.path.abspath(args.truth))):
        print(f"truthserver: --truth {args.truth}: its directory does not exist", file=sys.stderr)
        return 2
    import uvicorn  # here, so --help and argument errors do not pay for the import

    from benchmarks.truthserver.app import StampingProtocol, TruthServer, build_app

    server = TruthServer(opts, args.truth)
    config = uvicorn.Config(build_app(server), host=args.host, port=args.port, http=StampingProtocol,
                            loop=args.loop, log_level="warning", access_log=args.access_log,
                            timeout_keep_alive=5, timeout_graceful_shutdown=3)  # vLLM keeps alive 5 s too
    uvicorn.Server(config).run(sockets=[listening_socket(args.host, args.port)])
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's listening socket, with kernel receive stamps on.

    Set here, not per connection: a new connection's request usually arrives before the loop
    accepts it, and accepted sockets inherit the listener's flags, so even that first request
    keeps its arrival stamp.
    """
    from benchmarks.truthserver.app import enable_receive_stamps

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and accepted sockets inherit the listener's proto (without it, Nagle held each first
    # event behind the headers until the client's delayed ACK, ~24 ms on kept-alive connections)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    enable_receive_stamps(sock)
    return sock


if __name__ == "__main__":
    raise SystemExit(main())

"""``tokenswarm sim``: serve the simulated OpenAI-compatible LLM server until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import os
import sys

from tokenswarm.sim.engine import SpecConfig
from tokenswarm.sim.faults import FaultConfig
from tokenswarm.sim.profiles import ProfileError, load_profile


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rate between 0 and 1, got {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a rate between 0 and 1, got {text!r}")
    return v


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``tokenswarm sim`` (documented in the README)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (default 8000; 0 = any free port)")
    parser.add_argument("--profile", default="27b-1gpu", metavar="NAME_OR_YAML",
                        help="engine profile: a shipped name (27b-1gpu, tiny-fast, bench-10ms) or a YAML file")
    parser.add_argument("--served-model-name", default=None, help="model id to serve (default: the profile's)")
    parser.add_argument("--lora-modules", nargs="+", default=[], metavar="NAME[=PATH]",
                        help="LoRA adapter names to serve beside the model, as vLLM's --lora-modules: listed by "
                             "/v1/models (parent: the model) and accepted as a request's model; they share the "
                             "model's engine (PATH is ignored: no adapter is loaded or its cost modelled)")
    parser.add_argument("--spec-method", choices=("none", "draft", "ngram"), default="none",
                        help="speculative decoding: none, a draft model, or n-gram prompt lookup")
    parser.add_argument("--num-speculative-tokens", type=int, default=4, metavar="K",
                        help="draft tokens per step when speculating (default 4)")
    parser.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary"), default="none",
                        help="add vLLM-style metrics.speculative_decoding to final responses")
    parser.add_argument("--gpu-metrics", action="store_true",
                        help="also serve a DCGM-exporter-compatible GPU endpoint at /dcgm/metrics (modelled GPU)")
    parser.add_argument("--reasoning-tokens", type=int, default=0, metavar="N",
                        help="reasoning mode: the first N tokens of each chat stream are sent as reasoning_content "
                             "deltas (off with chat_template_kwargs.enable_thinking: false; default 0 = off)")
    parser.add_argument("--prefix-cache", action="store_true",
                        help="model a prefix cache: prefill of cached prompt blocks is skipped; hits and queries "
                             "exported as vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total")
    parser.add_argument("--seed", type=int, default=0, help="seed of fault decisions (default 0)")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help="require 'Authorization: Bearer KEY' on every request except /health and /_tokenswarm/* (as vLLM's "
                             "--api-key; vLLM checks only /v1 paths); others get 401 (default: $TOKENSWARM_SIM_API_KEY)")
    parser.add_argument("--basic-auth", metavar="USER:PASSWORD", default=None,
                        help="require HTTP basic auth instead, like a gateway in front of the server")
    parser.add_argument("--echo-headers-in-errors", action="store_true",
                        help="test aid: error answers quote the request's headers, like a careless gateway")
    parser.add_argument("--truth", metavar="PATH", default=None, help="write the ground-truth log (JSON lines)")
    g = parser.add_argument_group("faults (rates are probabilities 0..1, deterministic given --seed)")
    g.add_argument("--fault-http-500", type=_rate, default=0.0, metavar="RATE", help="answer HTTP 500")
    g.add_argument("--fault-http-503", type=_rate, default=0.0, metavar="RATE", help="answer HTTP 503")
    g.add_argument("--fault-http-429", type=_rate, default=0.0, metavar="RATE", help="answer HTTP 429")
    g.add_argument("--fault-cut", type=_rate, default=0.0, metavar="RATE",
                   help="cut the connection mid-stream (after 1-4 chunks)")
    g.add_argument("--fault-stall", type=_rate, default=0.0, metavar="RATE",
                   help="stall a stream mid-way for --stall-seconds")
    g.add_argument("--stall-seconds", type=_positive, default=5.0, metavar="S", help="stall length (default 5)")
    g.add_argument("--fault-draft-unavailable", type=_rate, default=0.0, metavar="RATE",
                   help="share of 64-step windows without a draft model (plain decoding fallback)")
    g.add_argument("--fault-draft-slow", type=_rate, default=0.0, metavar="RATE",
                   help="share of 64-step windows with a slow draft model")
    g.add_argument("--draft-slow-factor", type=_positive, default=5.0, metavar="F",
                   help="draft cost multiplier in slow windows (default 5)")
    g.add_argument("--fault-bad-usage", type=_rate, default=0.0, metavar="RATE",
                   help="report an impossible usage.completion_tokens in the final usage object")
    g.add_argument("--bad-usage-value", default="99999999999999999999999999999", metavar="JSON",
                   help="the raw JSON number (or value) --fault-bad-usage reports (default 10**29-1)")
    g.add_argument("--spec-divergence", type=_rate, default=0.0, metavar="RATE",
                   help="broken verifier: a speculative step emits a wrong token with this probability")


def run(args: argparse.Namespace) -> int:
    """Build the server from the parsed flags and serve; 2 on a bad profile or flags."""
    try:
        profile = load_profile(args.profile)
    except ProfileError as e:
        print(f"tokenswarm sim: {e}", file=sys.stderr)
        return 2
    if args.num_speculative_tokens < 1 or args.num_speculative_tokens > 16:
        print("tokenswarm sim: --num-speculative-tokens must be between 1 and 16", file=sys.stderr)
        return 2
    if args.spec_divergence > 0 and args.spec_method == "none":
        print("tokenswarm sim: note: --spec-divergence has no effect without --spec-method", file=sys.stderr)
    spec = SpecConfig(args.spec_method, args.num_speculative_tokens, args.spec_divergence, args.seed)
    faults = FaultConfig(
        http_500=args.fault_http_500, http_503=args.fault_http_503, http_429=args.fault_http_429,
        cut=args.fault_cut, stall=args.fault_stall, stall_s=args.stall_seconds,
        draft_unavailable=args.fault_draft_unavailable, draft_slow=args.fault_draft_slow,
        draft_slow_factor=args.draft_slow_factor, bad_usage=args.fault_bad_usage,
        bad_usage_value=args.bad_usage_value, seed=args.seed,
    )
    _raise_fd_limit()
    from tokenswarm.sim.server import SimServer, serve  # gevent and numpy: only once the arguments are checked

    try:
        server = SimServer(profile, spec, faults, args.host, args.port, args.truth, args.served_model_name,
                           args.per_request_spec_decode_metrics, gpu_metrics=args.gpu_metrics,
                           reasoning_tokens=max(0, args.reasoning_tokens), prefix_cache=args.prefix_cache,
                           api_key=args.api_key or os.environ.get("TOKENSWARM_SIM_API_KEY") or None,
                           basic_auth=args.basic_auth,
                           lora_modules=tuple(m.split("=", 1)[0] for m in args.lora_modules),
                           echo_headers=args.echo_headers_in_errors)
    except OSError as e:
        print(f"tokenswarm sim: cannot open --truth {args.truth}: {e}", file=sys.stderr)
        return 2
    return serve(server)


def _raise_fd_limit() -> None:
    """Thousands of concurrent streams need thousands of sockets (like vLLM, lift the soft limit)."""
    try:
        import resource  # not on every platform (Windows): a missing module is skipped like a refusal

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass

"""``tokenswarm make-test-model DIR``: build the tiny local Llama model for real-vLLM tests."""

from __future__ import annotations

import argparse
import sys
import time

from tokenswarm.testmodel.build import ModelSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the subcommand's options."""
    d = ModelSpec()
    parser.add_argument("dir", metavar="DIR", help="output directory (created if missing)")
    parser.add_argument(
        "--vocab-size", type=int, default=d.vocab_size, help=f"tokenizer size (default {d.vocab_size})"
    )
    parser.add_argument(
        "--layers", type=int, default=d.num_layers, help=f"decoder layers (default {d.num_layers})"
    )
    parser.add_argument(
        "--hidden",
        type=int,
        default=d.hidden_size,
        help=f"hidden size, a multiple of 64 (default {d.hidden_size})",
    )
    parser.add_argument("--seed", type=int, default=d.seed, help=f"weights seed (default {d.seed})")
    parser.add_argument(
        "--logit-scale",
        type=float,
        default=d.logit_scale,
        help=f"successor logit; higher = sampling stays on the cycle more often (default {d.logit_scale})",
    )
    parser.add_argument("--dtype", choices=["float32", "float16"], default=d.dtype, help="weights dtype")
    parser.add_argument("--force", action="store_true", help="overwrite a model already in DIR")
    parser.add_argument(
        "--gguf", action="store_true",
        help="also write DIR/model.gguf, the same model for llama.cpp's server (needs the gguf package)",
    )


def run(args: argparse.Namespace) -> int:
    """Build the model; exit 2 on bad options or an occupied directory."""
    try:
        # inside the try: a missing optional dependency is reported
        from tokenswarm.testmodel.build import ModelSpec, build_test_model
    except ImportError as exc:  # tokenizers / safetensors missing
        print(f"make-test-model: {exc}; install with: pip install 'tokenswarm[testmodel]'", file=sys.stderr)
        return 2
    spec = ModelSpec(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden,
        num_layers=args.layers,
        seed=args.seed,
        logit_scale=args.logit_scale,
        dtype=args.dtype,
    )
    started = time.perf_counter()
    try:
        manifest = build_test_model(args.dir, spec, overwrite=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"make-test-model: {exc}", file=sys.stderr)
        return 2
    s = manifest["spec"]
    p = manifest["successor_p_at_t1"]
    print(
        f"built {args.dir} in {time.perf_counter() - started:.1f} s: "
        f"LlamaForCausalLM vocab {s['vocab_size']}, "
        f"hidden {s['hidden_size']}, {s['num_layers']} layers, {s['dtype']}; "
        f"{manifest['cycle_token_count']} tokens in successor cycles, "
        f"P(successor) at temperature 1: median {p['median']}"
    )
    if args.gguf:
        try:
            # inside the try: a missing optional dependency is reported
            from tokenswarm.testmodel.gguf_export import export_gguf

            print(f"wrote {export_gguf(args.dir)} (GGUF, for llama-server -m)")
        except ImportError as exc:
            print(f"make-test-model: --gguf: {exc}; install with: pip install 'tokenswarm[testmodel]'",
                  file=sys.stderr)
            return 2
    return 0

"""The peers of ``peers.py``: each tool's command line, the reader of its own results file, and
the truth's ITL under that tool's definition.

Kept apart from ``peers.py`` (which starts servers and processes) so the readers and the ITL
definitions can be tested on small samples without running anything.

Every peer is run closed loop at ``--streams`` concurrency, streaming chat against the truth
server's ``/v1/chat/completions``, prompts of ``--prompt-tokens`` tokens by the local tokenizer,
answers of exactly ``--output-tokens`` tokens (``ignore_eos`` in every request), offline
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, the tokenizer ``build_tokenizer`` trains into
the run's directory). How each tool is told so, and what its figures mean (its own definitions,
read from its 2026-12 sources):

The tokenizer counts each of the truth server's words as one token, as the server does
(:func:`truth_words`), so a tool that re-tokenizes the stream counts the server's tokens.

* **vLLM ``bench serve``** (0.32): ``--backend openai-chat --dataset-name random --ignore-eos
  --max-concurrency N --num-prompts R``; reads ``result.json``: ``median_ttft_ms``,
  ``p99_ttft_ms``, ``median_itl_ms``. TTFT: request sent to the first content chunk. ITL:
  every gap between consecutive content chunks (``gap``).
* **AIPerf** (0.13.0): ``aiperf profile --endpoint-type chat --streaming --concurrency N
  --benchmark-duration S --isl P --isl-stddev 0 --osl O --osl-stddev 0 --extra-inputs
  ignore_eos:true --use-server-token-count``; reads ``profile_export_aiperf.json``:
  ``time_to_first_token.p50/p99``, ``inter_token_latency.p50``. TTFT: request start to the first
  content response. ITL: per request, (request latency - TTFT) / (output tokens - 1), the
  output tokens from the server's usage (``tpot``). Offline, AIPerf resolves ``--tokenizer`` as a
  Hub repository id even when it is a directory, so the tokenizer is laid out as a Hub cache entry
  (``HF_HUB_CACHE``, repository ``local/truth-tokenizer``; see :func:`hub_cache`).
* **GuideLLM** (0.8.1): ``guidellm run --backend kind=openai_http,...,request_format=
  /v1/chat/completions --profile kind=concurrent,streams=N --constraint
  kind=max_duration,seconds=S --data kind=synthetic_text,prompt_tokens=P,output_tokens=O``
  (GuideLLM itself adds ``ignore_eos`` when the data fixes the output length); reads its JSON
  output: ``benchmarks[0].metrics.time_to_first_token_ms.successful`` (``median``,
  ``percentiles.p99``) and ``inter_token_latency_ms.successful.median``. TTFT: request start to
  the first token iteration. ITL: per request, (last token - first token) / (output tokens - 1),
  output tokens from the server's usage, each request weighted by its output tokens - 1 (every
  answer here is as long, so the median is the per-request one: ``tpot``).
* **inference-perf** (0.7.0): ``inference-perf -c config.yaml`` with ``api.type: chat``, a
  ``concurrent`` load stage (``num_requests`` R at ``concurrency_level`` N, one worker: its
  default is one worker per CPU and the client has one core), ``shared_prefix`` data with no shared
  prefix (``system_prompt_len: 0``, ``question_len`` P, ``output_len`` O; an empty ``multimodal``
  block is what makes that generator send chat messages; ``random`` and ``synthetic`` send only
  completions) and ``server.ignore_eos``; reads ``summary_lifecycle_metrics.json``:
  ``successes.latency.time_to_first_token`` (``median``, ``p99``) and
  ``inter_token_latency.median``, seconds. TTFT: request start to the first token's chunk. ITL:
  inference-perf re-tokenizes each chunk's text with the tokenizer and gives every token the
  chunk's arrival time, so the per-token deltas are the chunk gap for a chunk's first token and 0
  for the others (``itl_zeros``, counted with the same tokenizer).

tokenswarm's own ITL (``itl_split``): each delivery's gap split evenly over its tokens.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any, Callable

from benchmarks.truthserver.plan import token_text  # what the truth server streams per token

#: the repository id under which AIPerf finds the local tokenizer in its Hub cache
HUB_TOKENIZER = "local/truth-tokenizer"
_HUB_REVISION = "0" * 40


class ResultError(ValueError):
    """A tool's results file lacks a figure this script reads (the message names file and field)."""


def _get(doc: Any, path: str, source: str) -> float:
    """``doc[a][b]...`` for ``path`` "a.b..." as a float; :class:`ResultError` naming both if absent."""
    node = doc
    for i, key in enumerate(path.split(".")):
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise ResultError(f"{source}: no field {'.'.join(path.split('.')[:i + 1])!r}")
    if not isinstance(node, (int, float)) or isinstance(node, bool) or not math.isfinite(node):
        raise ResultError(f"{source}: field {path!r} is {node!r}, not a number")
    return float(node)


# -- the readers: a tool's results document -> TTFT p50/p99 and ITL p50, ms -------------------------
def read_vllm(doc: dict[str, Any], source: str = "vllm result.json") -> dict[str, float]:
    return {"ttft_p50": _get(doc, "median_ttft_ms", source), "ttft_p99": _get(doc, "p99_ttft_ms", source),
            "itl_p50": _get(doc, "median_itl_ms", source)}


def read_aiperf(doc: dict[str, Any], source: str = "profile_export_aiperf.json") -> dict[str, float]:
    return {"ttft_p50": _get(doc, "time_to_first_token.p50", source),
            "ttft_p99": _get(doc, "time_to_first_token.p99", source),
            "itl_p50": _get(doc, "inter_token_latency.p50", source)}


def read_guidellm(doc: dict[str, Any], source: str = "guidellm benchmarks.json") -> dict[str, float]:
    m = "benchmarks.0.metrics."
    return {"ttft_p50": _get(doc, m + "time_to_first_token_ms.successful.median", source),
            "ttft_p99": _get(doc, m + "time_to_first_token_ms.successful.percentiles.p99", source),
            "itl_p50": _get(doc, m + "inter_token_latency_ms.successful.median", source)}


def read_inference_perf(doc: dict[str, Any], source: str = "summary_lifecycle_metrics.json") -> dict[str, float]:
    lat = "successes.latency."
    return {"ttft_p50": _get(doc, lat + "time_to_first_token.median", source) * 1000.0,
            "ttft_p99": _get(doc, lat + "time_to_first_token.p99", source) * 1000.0,
            "itl_p50": _get(doc, lat + "inter_token_latency.median", source) * 1000.0}


READERS: dict[str, Callable[..., dict[str, float]]] = {
    "vllm": read_vllm, "aiperf": read_aiperf, "guidellm": read_guidellm, "inference-perf": read_inference_perf}
#: each tool's ITL definition, as :func:`itl_samples` computes it on the truth
ITL_DEFS = {"tokenswarm": "itl_split", "vllm": "gap", "aiperf": "tpot", "guidellm": "tpot",
            "inference-perf": "itl_zeros"}


def read_result(tool: str, path: Path) -> dict[str, float]:
    """The tool's TTFT p50/p99 and ITL p50 (ms) from its results file; :class:`ResultError` if unusable."""
    if not path.exists():
        raise ResultError(f"{tool}: no results file at {path}")
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        raise ResultError(f"{tool}: {path} is not JSON ({e})") from None
    return READERS[tool](doc, str(path))


# -- the truth under each definition -----------------------------------------------------------------
def chunk_texts(sizes: list[int]) -> list[str]:
    """The text of each chunk of an answer cut into chunks of ``sizes`` tokens."""
    out, start = [], 0
    for n in sizes:
        out.append("".join(token_text(i) for i in range(start, start + n)))
        start += n
    return out


def itl_samples(chunks: list[tuple[float, int]], itl_def: str,
                count_tokens: Callable[[str], int] | None = None) -> list[float]:
    """The ITL samples (ms) one request's truth chunks ``[(sent s, tokens), ...]`` give by ``itl_def``.

    ``gap``: every chunk gap; ``itl_split``: each gap as ``n`` samples of gap / n; ``tpot``: one
    sample, (last - first chunk) / (tokens - 1); ``itl_zeros``: per token as the tool's tokenizer
    (``count_tokens``) cuts each chunk's text, the gap for a chunk's first token, 0 for the rest.
    """
    if itl_def == "tpot":
        total = sum(n for _, n in chunks)
        return [(chunks[-1][0] - chunks[0][0]) * 1000.0 / (total - 1)] if total > 1 else []
    if itl_def == "itl_zeros":
        if count_tokens is None:
            raise ValueError("itl_zeros needs the tool's token counter")
        per_chunk = [count_tokens(t) for t in chunk_texts([int(n) for _, n in chunks])]
        times = [t for (t, _), m in zip(chunks, per_chunk) for _ in range(m)]
        return [(b - a) * 1000.0 for a, b in zip(times, times[1:])]
    out: list[float] = []
    for (a, _), (b, n) in zip(chunks, chunks[1:]):
        gap = (b - a) * 1000.0
        if itl_def == "gap":
            out.append(gap)
        elif itl_def == "itl_split":
            out.extend([gap / n] * int(n))
        else:
            raise ValueError(f"unknown ITL definition {itl_def!r}")
    return out


def truth_words(tokenizer_dir: Path) -> Path:
    """Add the truth server's 1,000 words (" w0" .. " w999") to the tokenizer as whole tokens, in place.

    The server counts one token per word; a client that re-tokenizes the streamed text (AIPerf
    for its output lengths, inference-perf for its per-token times) must count as many, or its
    lengths and ITL describe the test tokenizer, not the stream. Byte-level BPE alone cuts each
    word into 2-3 pieces.
    """
    from tokenizers import AddedToken, Tokenizer  # the tokenizer's own library: only this path needs it

    path = tokenizer_dir / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    tok.add_tokens([AddedToken(token_text(i), normalized=False) for i in range(1000)])
    tok.save(str(path))
    return tokenizer_dir


def token_counter(tokenizer_dir: Path) -> Callable[[str], int]:
    """Tokens in a text by the local tokenizer (no special tokens), as inference-perf counts them."""
    from tokenizers import Tokenizer  # the tokenizer's own library: only this path needs it

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))

    @cache
    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


# -- the command lines -------------------------------------------------------------------------------
def hub_cache(tokenizer_dir: Path, cache: Path) -> Path:
    """``cache`` laid out as a Hugging Face Hub cache holding the tokenizer as :data:`HUB_TOKENIZER`."""
    repo = cache / f"models--{HUB_TOKENIZER.replace('/', '--')}"
    snap = repo / "snapshots" / _HUB_REVISION
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(_HUB_REVISION)
    for f in tokenizer_dir.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    return cache


def aiperf_command(exe: Path, host: str, out: Path, streams: int, seconds: float, prompt_tokens: int,
                   output_tokens: int) -> list[str]:
    return [str(exe), "profile", "--model", "truth", "--url", host, "--endpoint-type", "chat", "--streaming",
            "--tokenizer", HUB_TOKENIZER, "--concurrency", str(streams), "--benchmark-duration", f"{seconds:g}",
            "--isl", str(prompt_tokens), "--isl-stddev", "0", "--osl", str(output_tokens), "--osl-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--random-seed", "1",
            "--artifact-dir", str(out), "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry"]


def guidellm_command(exe: Path, host: str, out_json: Path, tokenizer_dir: Path, streams: int, seconds: float,
                     prompt_tokens: int, output_tokens: int) -> list[str]:
    return [str(exe), "run",
            "--backend", f"kind=openai_http,target={host},model=truth,request_format=/v1/chat/completions",
            "--profile", f"kind=concurrent,streams={streams}",
            "--constraint", f"kind=max_duration,seconds={seconds:g}",
            "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir}",
            "--output", f"kind=json,path={out_json}", "--disable-console-interactive"]


def inference_perf_config(host: str, out: Path, tokenizer_dir: Path, streams: int, requests: int,
                          prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """inference-perf's configuration (written as YAML; JSON is YAML) for one closed-loop run."""
    return {
        "api": {"type": "chat", "streaming": True},
        "data": {"type": "shared_prefix", "multimodal": {},
                 "shared_prefix": {"num_groups": 1, "num_prompts_per_group": 64, "system_prompt_len": 0,
                                   "question_len": prompt_tokens, "output_len": output_tokens, "seed": 1}},
        "load": {"type": "concurrent", "stages": [{"num_requests": requests, "concurrency_level": streams}],
                 "num_workers": 1, "worker_max_concurrency": streams, "base_seed": 1},
        "server": {"type": "vllm", "model_name": "truth", "base_url": host, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer_dir)},
        "storage": {"local_storage": {"path": str(out)}},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": False,
                                         "percentiles": [50, 99]},
                   "prometheus": {"summary": False, "per_stage": False}},
    }

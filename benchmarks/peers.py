"""tokenswarm and its peers side by side on one ground-truth server: CPU, memory, and timing errors.

Every client drives the same uvicorn truth server (``benchmarks/truthserver``, pinned to core 1;
each client on core 0) with the same load: ``--streams`` concurrent streaming chat requests in
closed loop, prompts of about ``--prompt-tokens`` tokens, ``--output-tokens``-token answers
(``ignore_eos``), for about ``--seconds``. The clients take turns, A B C D A B C D
(``--rounds``), so slow drifts of a shared machine hit all alike. Two server profiles
(``--profiles``): ``spec`` (3 tokens per chunk every 10 ms, 40 ms to the first chunk: what
speculative decoding sends) and ``plain`` (one token per chunk every 5 ms, 20 ms TTFT).

Per run it prints the client's whole-process CPU (start to exit, ``getrusage`` of the waited
process tree) per chunk the server wrote to it, its peak RSS (the process tree's resident set,
sampled every 0.2 s), and its timing figures against the truth under its own definitions:
TTFT p50/p99 as the tool reports it next to the same percentile of the server's truth over the
requests it received during that run (``tool / truth``), and the tool's ITL p50 next to the
truth's ITL *by the tool's definition* (tokenswarm: each gap split over its tokens; vLLM: every
gap between chunks; AIPerf and GuideLLM: per request, (last - first token) / (tokens - 1);
inference-perf: per token as its tokenizer cuts the chunks, the gap then zeros). tokenswarm's
records also join the truth request by request (response id), so its row adds the per-request
TTFT, chunk-gap and e2e error p99.

Clients (how each is run and what its figures mean: ``peer_tools.py``'s docstring):

* ``tokenswarm``: this tree, ``locust -f locustfiles/llm.py`` on a one-class scenario;
* ``vllm``: ``vllm bench serve`` (``--backend openai-chat``, random dataset) from the vLLM
  venv (``--vllm-python``, default ``/root/.cache/tokenswarm/vllm-venv/bin/python``), called
  through ``vllm.benchmarks.serve`` (that venv's ``vllm`` script needs the package metadata);
* ``aiperf``, ``guidellm``, ``inference-perf``: from ``~/.cache/tokenswarm/peers/peer-<name>/bin/<name>``
  (``--peer-venvs``; Python 3.12 venvs, installed as docs/benchmarks.md says). A tool that is
  not installed is reported as unavailable, one that fails as FAILED with the end of its stderr,
  never silently left out.

Each peer's TTFT and ITL are read from its own results file (vLLM ``result.json``, AIPerf
``profile_export_aiperf.json``, GuideLLM's JSON output, inference-perf
``summary_lifecycle_metrics.json``); chunks and requests are counted from the truth log.

All offline (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``): the tokenizer is the test
model's (``tokenswarm/testmodel``), trained locally into the run's directory, and every tool
is pointed at it. Not part of CI or of the test suite: a benchmark, run by hand.

    python benchmarks/peers.py
    python benchmarks/peers.py --profiles spec --rounds 1 --seconds 15 --keep
    python benchmarks/peers.py --profiles spec --rounds 1 --seconds 20 --clients tokenswarm vllm
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costrun import stamp  # noqa: E402
from peer_tools import (  # noqa: E402
    ITL_DEFS,
    ResultError,
    aiperf_command,
    guidellm_command,
    hub_cache,
    inference_perf_config,
    itl_samples,
    read_result,
    token_counter,
    truth_words,
)
from spec_workload import _children_cpu, process_tree_sum  # noqa: E402
from truthjoin import join, load_truth  # noqa: E402
from truthserver.testing import start_truth  # noqa: E402

PROFILES = {  # truth server options: tokens per chunk, step ms, TTFT ms
    "spec": ("3", 10.0, 40.0),
    "plain": ("1", 5.0, 20.0),
}
CLIENTS = ("tokenswarm", "vllm", "aiperf", "guidellm", "inference-perf")
VLLM_PYTHON = "/root/.cache/tokenswarm/vllm-venv/bin/python"
#: Where the peers' venvs are (``--peer-venvs``): beside the vLLM venv, outside any checkout.
PEER_VENVS = str(Path.home() / ".cache" / "tokenswarm" / "peers")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # no tool may reach the Hub
_VLLM_MAIN = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
              "from vllm.benchmarks.serve import add_cli_args, main\n"
              "p = FlexibleArgumentParser()\nadd_cli_args(p)\nmain(p.parse_args(sys.argv[1:]))\n")


def build_tokenizer(out: Path) -> Path:
    """The test model's byte-level BPE tokenizer, trained here (no download)."""
    from tokenswarm.testmodel.tokenizer import save_tokenizer, train_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer(train_tokenizer(2048), out, model_max_length=8192)
    return out


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its children now."""
    return int(process_tree_sum(pid, lambda p: p.memory_info().rss))


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> dict[str, Any]:
    """Run a client to completion on core 0: whole-process CPU, peak RSS, its output."""
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = _children_cpu()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    done.set()
    sampler.join()
    return {"start": start, "end": time.monotonic(), "cpu_s": _children_cpu() - before, "peak_rss_mb": peak[0] / 2**20,
            "returncode": proc.returncode, "stdout": out, "stderr": err}


# -- the clients -------------------------------------------------------------------------------------
def tokenswarm_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    run = work / f"ts-{tag}"
    scenario = work / f"ts-{tag}.yaml"
    scenario.write_text(json.dumps({
        "name": "peers", "target": {"metrics_url": None, "timeouts": {"first_token_s": 600, "total_s": 600}},
        "traffic": {"seed": 1, "classes": {"qa": {
            "weight": 1, "prompt_tokens": {"dist": "fixed", "value": args.prompt_tokens},
            "max_tokens": {"dist": "fixed", "value": args.output_tokens},
            "sampling": {"ignore_eos": True, "temperature": 0.0}}}},
        "load": {"mode": "closed", "steps": [args.streams], "warmup_s": 0, "step_duration_s": args.seconds,
                 "spawn_rate": 1000, "stop_timeout_s": 10}, "slo": {}}))
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless", "--scenario",
           str(scenario), "--host", host, "--out", str(run), "--only-summary"]
    res = run_measured(cmd, {"PYTHONPATH": str(ROOT)}, ROOT, args.seconds + 180)
    if res["returncode"] not in (0, 1):
        return {**res, "error": res["stderr"][-400:]}
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines() if x]
    ok = [r for r in records if r["outcome"] == "ok" and r["ttft_ms"] is not None]
    ttfts = [r["ttft_ms"] for r in ok]
    itls: list[float] = []  # tokenswarm's ITL: each delivery's gap split over its tokens
    for r in ok:
        offs, toks = r["chunk_offsets_ms"], r["chunk_tokens"] or []
        for a, b, n in zip(offs, offs[1:], toks[1:]):
            itls.extend([(b - a) / n] * n if n else [])
    return {**res, "records": records, "ttft_ms": ttfts, "itl_ms": itls, "itl_def": "itl_split"}


def request_count(args: argparse.Namespace) -> int:
    """Requests for about ``--seconds`` of closed loop, for the tools that take a count, not a duration."""
    tokens, step_ms, ttft_ms = PROFILES[args.profile]
    e2e_s = (ttft_ms + math.ceil(args.output_tokens / int(tokens)) * step_ms) / 1000.0
    return max(args.streams, int(args.streams * args.seconds / e2e_s))


def finish(name: str, res: dict[str, Any], result: Path) -> dict[str, Any]:
    """A peer's run: its figures from its results file, or the failure with its stderr tail."""
    if (code := res["returncode"]) != 0:
        tail = (res["stderr"] or res["stdout"]).strip()[-600:]
        how = f"killed by signal {-code} (SIGKILL: past its time limit)" if code == -9 else f"exit {code}"
        return {**res, "error": f"{how}: {tail}"}
    try:
        return {**res, "reported": read_result(name, result), "itl_def": ITL_DEFS[name]}
    except ResultError as e:
        tail = (res["stderr"] or res["stdout"]).strip()[-400:]
        return {**res, "error": f"{e}; stderr: {tail}"}


def find_exe(name: str, args: argparse.Namespace) -> Path | None:
    exe = Path(args.peer_venvs) / f"peer-{name}" / "bin" / name
    return exe if exe.exists() else None


def not_installed(name: str, args: argparse.Namespace) -> dict[str, Any]:
    venv = Path(args.peer_venvs) / f"peer-{name}"
    return {"unavailable": f"not installed ({venv}/bin/{name} missing; see docs/benchmarks.md, 'Installing the peers')"}


def vllm_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    python = args.vllm_python
    if not Path(python).exists():
        return {"unavailable": f"no vLLM venv at {python}"}
    out = work / f"vllm-{tag}"
    out.mkdir(exist_ok=True)
    cmd = [python, "-c", _VLLM_MAIN, "--backend", "openai-chat", "--base-url", host, "--endpoint",
           "/v1/chat/completions", "--model", "truth", "--tokenizer", str(args.tokenizer), "--dataset-name", "random",
           "--random-input-len", str(args.prompt_tokens), "--random-output-len", str(args.output_tokens),
           "--ignore-eos", "--max-concurrency", str(args.streams), "--num-prompts", str(request_count(args)),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--disable-tqdm",
           "--save-result", "--result-dir", str(out), "--result-filename", "result.json", "--num-warmups", "0"]
    res = run_measured(cmd, OFFLINE, work, args.seconds * 4 + 300)
    return finish("vllm", res, out / "result.json")


def aiperf_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    if (exe := find_exe("aiperf", args)) is None:
        return not_installed("aiperf", args)
    out = work / f"aiperf-{tag}"
    cmd = aiperf_command(exe, host, out, args.streams, args.seconds, args.prompt_tokens, args.output_tokens)
    res = run_measured(cmd, {**OFFLINE, "HF_HUB_CACHE": str(args.hub_cache)}, work, args.seconds * 4 + 300)
    return finish("aiperf", res, out / "profile_export_aiperf.json")


def guidellm_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    if (exe := find_exe("guidellm", args)) is None:
        return not_installed("guidellm", args)
    out = work / f"guidellm-{tag}.json"
    cmd = guidellm_command(exe, host, out, args.tokenizer, args.streams, args.seconds, args.prompt_tokens,
                           args.output_tokens)
    res = run_measured(cmd, OFFLINE, work, args.seconds * 4 + 300)
    return finish("guidellm", res, out)


def inference_perf_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    if (exe := find_exe("inference-perf", args)) is None:
        return not_installed("inference-perf", args)
    out = work / f"inference-perf-{tag}"
    config = work / f"inference-perf-{tag}.yaml"
    config.write_text(json.dumps(inference_perf_config(host, out, args.tokenizer, args.streams, request_count(args),
                                                       args.prompt_tokens, args.output_tokens)))
    res = run_measured([str(exe), "-c", str(config)], OFFLINE, work, args.seconds * 4 + 300)
    return finish("inference-perf", res, out / "summary_lifecycle_metrics.json")


RUNNERS = {"tokenswarm": tokenswarm_run, "vllm": vllm_run, "aiperf": aiperf_run, "guidellm": guidellm_run,
           "inference-perf": inference_perf_run}


# -- the truth, by each tool's definitions ----------------------------------------------------------
def q(values: list[float], p: float) -> float:
    """The ``p`` quantile, NaN when there is nothing to take it of."""
    return float(np.quantile(values, p)) if values else float("nan")


def truth_figures(truth: dict[str, dict], start: float, end: float, itl_def: str,
                  count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """TTFT p50/p99 and ITL p50 (by ``itl_def``) of the requests the server received in [start, end]."""
    window = [t for t in truth.values() if start <= t["received"] <= end]
    mine = [t for t in window if t["chunks"] and t.get("outcome") == "ok"]  # timings: completed answers only
    ttft = [(t["chunks"][0][0] - t["received"]) * 1000.0 for t in mine]
    itl = [x for t in mine for x in itl_samples(t["chunks"], itl_def, count_tokens)]
    # the cost is per chunk written to the client, answers it cut at its deadline included
    return {"requests": len(window), "ok": len(mine), "chunks": sum(len(t["chunks"]) for t in window),
            "ttft_p50": q(ttft, .5), "ttft_p99": q(ttft, .99), "itl_p50": q(itl, .5)}


def row_for(name: str, res: dict[str, Any], truth: dict[str, dict],
            count_tokens: Callable[[str], int] | None = None) -> dict[str, Any]:
    """One printed row: the run's cost, its own figures and the truth's by its definitions."""
    if "unavailable" in res:
        return {"client": name, "unavailable": res["unavailable"]}
    if "error" in res:
        return {"client": name, "failed": res["error"]}
    t = truth_figures(truth, res["start"], res["end"], res["itl_def"], count_tokens)
    row = {"client": name, "truth": t, "cpu_us_per_chunk": res["cpu_s"] / t["chunks"] * 1e6 if t["chunks"] else None,
           "peak_rss_mb": res["peak_rss_mb"]}
    if "records" in res:  # tokenswarm: its own percentiles, and the per-request join
        row["reported"] = {"ttft_p50": q(res["ttft_ms"], .5), "ttft_p99": q(res["ttft_ms"], .99),
                           "itl_p50": q(res["itl_ms"], .5)}
        window = {k: v for k, v in truth.items() if res["start"] <= v["received"] <= res["end"]}
        row["join"] = join([(r["response_id"], r["ttft_ms"], r["chunk_offsets_ms"], r.get("e2e_ms"))
                            for r in res["records"] if r["outcome"] == "ok"], window)
    else:
        row["reported"] = res["reported"]
    return row


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(f"{'client':<16} {'requests':>8} {'CPU us/chunk':>12} {'peak RSS MB':>11} {'TTFT p50 tool/truth':>20} "
          f"{'TTFT p99 tool/truth':>20} {'ITL p50 tool/truth (def)':>26}  per-request errors p99 (TTFT/gap/e2e)")
    for r in rows:
        if "unavailable" in r:
            print(f"{r['client']:<16} unavailable: {r['unavailable']}")
            continue
        if "failed" in r:  # the tool's own words, so the failure can be acted on
            print(f"{r['client']:<16} FAILED: " + r["failed"].replace("\n", "\n" + " " * 25))
            continue
        rep, t = r["reported"], r["truth"]

        def pair(key: str, rep: dict = rep, t: dict = t) -> str:
            a, b = rep.get(key), t[key]
            return "n/a" if a is None else f"{a:.2f}/{b:.2f} ({a - b:+.2f})"

        j = r.get("join")
        errs = (f"{j['ttft_err_p99_ms']:.2f}/{j['gap_err_p99_ms']:.2f}/{j['e2e_err_p99_ms']:.2f} ms"
                if j and j["joined"] else "-")
        print(f"{r['client']:<16} {t['requests']:>8} {r['cpu_us_per_chunk'] or 0:>12.1f} {r['peak_rss_mb']:>11.0f} "
              f"{pair('ttft_p50'):>20} "
              f"{pair('ttft_p99'):>20} {pair('itl_p50'):>20} ({r.get('itl_def', '')})  {errs}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    ap.add_argument("--profiles", nargs="+", choices=list(PROFILES), default=list(PROFILES))
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--vllm-python", default=VLLM_PYTHON)
    ap.add_argument("--peer-venvs", default=PEER_VENVS,
                    help="where the peers' venvs are: DIR/peer-aiperf, DIR/peer-guidellm, DIR/peer-inference-perf")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (every tool's results files)")
    args = ap.parse_args()
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"started {stamp()}")
    work = Path(tempfile.mkdtemp(prefix="tokenswarm-peers-"))
    args.tokenizer = truth_words(build_tokenizer(work / "tokenizer"))
    args.hub_cache = hub_cache(args.tokenizer, work / "hub")  # AIPerf's offline view of the same tokenizer
    count_tokens = token_counter(args.tokenizer)
    for profile in args.profiles:
        args.profile = profile
        tokens, step_ms, ttft_ms = PROFILES[profile]
        truth_path = work / f"truth-{profile}.jsonl"
        results: list[tuple[str, dict]] = []
        with start_truth(truth_path, "--step-ms", str(step_ms), "--tokens-per-chunk", tokens, "--ttft-ms",
                         str(ttft_ms), cpus="1") as srv:
            unavailable: set[str] = set()
            for n in range(args.rounds):  # A B C D A B C D
                for name in args.clients:
                    if name in unavailable:
                        continue  # said once, in the first round
                    res = RUNNERS[name](args, srv.base_url, work, f"{profile}-{n}")
                    res["itl_def"] = res.get("itl_def", "")
                    if "unavailable" in res:
                        unavailable.add(name)
                    results.append((f"{name} #{n + 1}" if args.rounds > 1 else name, res))
                    state = "unavailable" if "unavailable" in res else "FAILED" if "error" in res else "done"
                    print(f"{state}: {profile} round {n + 1} {name}", file=sys.stderr)
            srv.flush()
        truth = load_truth(truth_path)
        rows = []
        for name, res in results:
            row = row_for(name, res, truth, count_tokens)
            row["itl_def"] = res.get("itl_def")
            rows.append(row)
        print(f"\n== {profile}: {tokens} token(s) per chunk every {step_ms:g} ms, TTFT {ttft_ms:g} ms; {args.streams} "
              f"streams, ~{args.prompt_tokens}-token prompts, {args.output_tokens}-token answers, ~{args.seconds:g} s "
              f"per run, {args.rounds} round(s) A B C D E; finished {stamp()}")
        print_rows(rows)
    print("\nCPU: whole process (start-up included) per chunk the server wrote to it; RSS summed over the "
          "client's processes. tool/truth: the tool's own percentile next to the truth server's over the same "
          "requests, by the tool's definition (gap: every chunk gap; itl_split: each gap split over its tokens; "
          "tpot: per request, (last - first chunk) / (tokens - 1); itl_zeros: per token by the tool's tokenizer, "
          "the gap for a chunk's first token and 0 for the others).")
    if args.keep:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

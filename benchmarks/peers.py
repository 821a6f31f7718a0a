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
truth's ITL *by the tool's definition* (vLLM: the gap between chunks; tokenswarm: the gap split
per token). tokenswarm's records also join the truth request by request (response id), so its
row adds the per-request TTFT, chunk-gap and e2e error p99.

Clients:

* ``tokenswarm``: this tree, ``locust -f locustfiles/llm.py`` on a one-class scenario;
* ``vllm``: ``vllm bench serve`` (``--backend openai-chat``, random dataset) from the vLLM
  venv (``--vllm-python``, default ``/root/.cache/tokenswarm/vllm-venv/bin/python``), called
  through ``vllm.benchmarks.serve`` (that venv's ``vllm`` script needs the package metadata);
* ``aiperf``, ``guidellm``, ``inference-perf``: looked for in ``/work/venvs/peer-<name>``
  (``--peer-venvs``); a tool that is not installed, or that this script does not know how to
  run, is reported as unavailable with the reason, never silently left out.

All offline: the tokenizer is the test model's (``tokenswarm/testmodel``), trained locally
into a temporary directory.

    python benchmarks/peers.py
    python benchmarks/peers.py --profiles spec --rounds 1 --seconds 20 --clients tokenswarm vllm
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from request_cost import stamp  # noqa: E402
from spec_workload import _children_cpu, process_tree_sum  # noqa: E402
from truthjoin import join, load_truth  # noqa: E402
from truthserver.testing import start_truth  # noqa: E402

PROFILES = {  # truth server options: tokens per chunk, step ms, TTFT ms
    "spec": ("3", 10.0, 40.0),
    "plain": ("1", 5.0, 20.0),
}
CLIENTS = ("tokenswarm", "vllm", "aiperf", "guidellm", "inference-perf")
VLLM_PYTHON = "/root/.cache/tokenswarm/vllm-venv/bin/python"
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
            "output_tokens": {"dist": "fixed", "value": args.output_tokens},
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


def vllm_run(args: argparse.Namespace, host: str, work: Path, tag: str) -> dict[str, Any]:
    python = args.vllm_python
    if not Path(python).exists():
        return {"unavailable": f"no vLLM venv at {python}"}
    e2e_s = PROFILES[args.profile][2] / 1000 + args.output_tokens / int(PROFILES[args.profile][0]) * \
        PROFILES[args.profile][1] / 1000
    prompts = max(args.streams, int(args.streams * args.seconds / e2e_s))
    out = work / f"vllm-{tag}"
    out.mkdir(exist_ok=True)
    cmd = [python, "-c", _VLLM_MAIN, "--backend", "openai-chat", "--base-url", host, "--endpoint",
           "/v1/chat/completions", "--model", "truth", "--tokenizer", str(args.tokenizer), "--dataset-name", "random",
           "--random-input-len", str(args.prompt_tokens), "--random-output-len", str(args.output_tokens),
           "--ignore-eos", "--max-concurrency", str(args.streams), "--num-prompts", str(prompts),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--disable-tqdm",
           "--save-result", "--result-dir", str(out), "--result-filename", "result.json", "--num-warmups", "0"]
    res = run_measured(cmd, {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, work, args.seconds * 4 + 300)
    path = out / "result.json"
    if res["returncode"] != 0 or not path.exists():
        return {**res, "error": (res["stderr"] or res["stdout"])[-400:]}
    r = json.loads(path.read_text())
    return {**res, "reported": {"ttft_p50": r.get("median_ttft_ms"), "ttft_p99": r.get("p99_ttft_ms"),
                                "itl_p50": r.get("median_itl_ms")}, "itl_def": "gap"}


def peer_unavailable(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """AIPerf, GuideLLM, inference-perf: say why they were not run."""
    venv = Path(args.peer_venvs) / f"peer-{name}"
    exe = venv / "bin" / ("inference-perf" if name == "inference-perf" else name)
    if not exe.exists():
        return {"unavailable": f"not installed ({exe} missing; pip install {name} into {venv})"}
    return {"unavailable": f"installed at {exe}, but this script has no verified command line for it yet"}


# -- the truth, by each tool's definitions ----------------------------------------------------------
def q(values: list[float], p: float) -> float:
    """The ``p`` quantile, NaN when there is nothing to take it of."""
    return float(np.quantile(values, p)) if values else float("nan")


def truth_figures(truth: dict[str, dict], start: float, end: float, itl_def: str) -> dict[str, Any]:
    """TTFT p50/p99 and ITL p50 (by ``itl_def``) of the requests the server received in [start, end]."""
    mine = [t for t in truth.values() if start <= t["received"] <= end and t["chunks"] and t.get("outcome") == "ok"]
    ttft = [(t["chunks"][0][0] - t["received"]) * 1000.0 for t in mine]
    itl: list[float] = []
    for t in mine:
        c = t["chunks"]
        for (a, _), (b, n) in zip(c, c[1:]):
            gap = (b - a) * 1000.0
            if itl_def == "gap":
                itl.append(gap)
            else:  # itl_split: n samples of gap/n
                itl.extend([gap / n] * int(n))
    return {"requests": len(mine), "chunks": sum(len(t["chunks"]) for t in mine),
            "ttft_p50": q(ttft, .5), "ttft_p99": q(ttft, .99), "itl_p50": q(itl, .5)}


def row_for(name: str, res: dict[str, Any], truth: dict[str, dict]) -> dict[str, Any]:
    if "unavailable" in res:
        return {"client": name, "unavailable": res["unavailable"]}
    if "error" in res:
        return {"client": name, "unavailable": f"run failed: {res['error']}"}
    t = truth_figures(truth, res["start"], res["end"], res["itl_def"])
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
    print(f"{'client':<16} {'CPU us/chunk':>12} {'peak RSS MB':>11} {'TTFT p50 tool/truth':>20} "
          f"{'TTFT p99 tool/truth':>20} {'ITL p50 tool/truth (def)':>26}  per-request errors p99 (TTFT/gap/e2e)")
    for r in rows:
        if "unavailable" in r:
            print(f"{r['client']:<16} unavailable: {r['unavailable']}")
            continue
        rep, t = r["reported"], r["truth"]

        def pair(key: str, rep: dict = rep, t: dict = t) -> str:
            a, b = rep.get(key), t[key]
            return "n/a" if a is None else f"{a:.2f}/{b:.2f} ({a - b:+.2f})"

        j = r.get("join")
        errs = (f"{j['ttft_err_p99_ms']:.2f}/{j['gap_err_p99_ms']:.2f}/{j['e2e_err_p99_ms']:.2f} ms"
                if j and j["joined"] else "-")
        print(f"{r['client']:<16} {r['cpu_us_per_chunk'] or 0:>12.1f} {r['peak_rss_mb']:>11.0f} {pair('ttft_p50'):>20} "
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
    ap.add_argument("--peer-venvs", default="/work/venvs")
    args = ap.parse_args()
    print(f"command: {shlex.join([sys.executable, *sys.argv])}")
    print(f"started {stamp()}")
    work = Path(tempfile.mkdtemp(prefix="tokenswarm-peers-"))
    args.tokenizer = build_tokenizer(work / "tokenizer")
    runners = {"tokenswarm": tokenswarm_run, "vllm": vllm_run}
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
                    runner = runners.get(name)
                    res = runner(args, srv.base_url, work, f"{profile}-{n}") if runner else peer_unavailable(name, args)
                    res["itl_def"] = res.get("itl_def", "")
                    if "unavailable" in res:
                        unavailable.add(name)
                    results.append((name, res))
                    print(f"done: {profile} round {n + 1} {name}", file=sys.stderr)
            srv.flush()
        truth = load_truth(truth_path)
        rows = []
        for name, res in results:
            row = row_for(name, res, truth)
            row["itl_def"] = res.get("itl_def")
            rows.append(row)
        print(f"\n== {profile}: {tokens} token(s) per chunk every {step_ms:g} ms, TTFT {ttft_ms:g} ms; {args.streams} "
              f"streams, ~{args.prompt_tokens}-token prompts, {args.output_tokens}-token answers, ~{args.seconds:g} s "
              f"per run, {args.rounds} round(s) A B C D; finished {stamp()}")
        print_rows(rows)
    print("\nCPU: whole process (start-up included) per chunk the server wrote to it; RSS summed over the "
          "client's processes. tool/truth: the tool's own percentile next to the truth server's over the same "
          "requests, by the tool's definition (gap: per chunk; itl_split: the gap split per token).")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

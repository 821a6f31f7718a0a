"""The direction of n-gram speculation's speedup on vLLM's real server, on an idle machine.

The tiny test model's greedy output cycles, so n-gram drafts are nearly all accepted and vLLM
streams about 4 tokens a step instead of 1: ``tokenswarm compare`` measured about 2x at
concurrency 1 and 4 (docs/vllm-example-report.md; 2.08x and 2.57x aggregate on 2026-12-06).
The ratio compares two runs made one after the other, so it holds only while the machine's
load is the same for both. Beside the other test workers the engines run at nice 19 (so they
do not starve the rest of the suite) and get what the neighbours leave: the project's CI once
measured 0.87x aggregate at c1 there (2026-12-06). So this is a ``timing`` test, like
test_llamacpp_speedup.py: CI runs it in its own stage, on an otherwise idle machine. The other
checks of the same kind of runs (identical outputs, acceptance, the compare's arithmetic) hold
under any load and stay in test_vllm_runs.py.

Each server is started here for the one ``compare`` scenario only (about a minute each).
"""

from __future__ import annotations

import json

import pytest

from tests.real_engine.test_vllm_runs import ran, tokenswarm_cli
from tests.real_engine.vllm_runs import SKIP_REASON, EngineRuns, serve_and_run

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timing,
    pytest.mark.timeout(900),
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]


@pytest.fixture(scope="module")
def compare_runs(engine_model_dir, tmp_path_factory) -> tuple[EngineRuns, EngineRuns]:
    """The ``compare`` scenario against vLLM without, then with, n-gram speculation."""
    work = tmp_path_factory.mktemp("vllm-speedup")
    base = serve_and_run(engine_model_dir, work / "baseline", speculative=False, names=("compare",))
    cand = serve_and_run(engine_model_dir, work / "ngram", speculative=True, names=("compare",))
    return base, cand


def test_n_gram_speculation_is_reported_as_a_gain_at_every_concurrency(compare_runs, tmp_path):
    base, cand = compare_runs
    res = tokenswarm_cli("compare", str(ran(base, "compare")), str(ran(cand, "compare")), "--no-plots",
                         "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = [r for r in json.loads((tmp_path / "summary.json").read_text())["rows"] if r["task"] == "all"]
    assert [r["step_name"] for r in rows] == ["c1", "c4"]
    for r in rows:
        # tolerance: none on the direction; the per-request gain must also be significant (its
        # 95 % bootstrap interval above 1), since about 2x was measured on this model
        for key in ("output_tokens_per_s_speedup_ratio", "request_output_tps_p50_speedup_ratio",
                    "request_output_tps_p50_speedup_ci_low_ratio"):
            assert r[key] > 1.0, (
                f"step {r['step_name']}: {key} {r[key]:.3f} for n-gram speculation that streams ~4 tokens a "
                f"step (needs a machine idle during both runs)", r)

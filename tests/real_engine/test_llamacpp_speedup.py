"""The direction of a speedup measured on llama.cpp's real server: a draft as large as its target
must be reported as a slowdown.

A draft model as large as the target costs a target's forward pass per drafted token, so
speculation can give at most 1x before its overheads, and ``tokenswarm compare`` must report a
ratio below 1, not a gain. The ratio compares two runs made one after the other, so it holds
only while the machine's load is the same for both: beside other tests (parallel workers on two
cores) the baseline once ran while the machine was busier and the draft measured 1.18x. So this
is a ``timing`` test: CI runs it in its own stage, on an otherwise idle machine, where it needs
the real-engine tier like the rest of ``tests/real_engine`` (.ci/run). The other comparisons of
the same runs (identical outputs, acceptance) hold under any load and stay in
test_llamacpp_runs.py.
"""

from __future__ import annotations

import json

import pytest

from tests.real_engine.llamacpp_runs import SKIP_REASON
from tests.real_engine.test_llamacpp_runs import ran
from tests.real_engine.test_vllm_runs import tokenswarm_cli

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timing,
    pytest.mark.timeout(600),
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]


def test_a_draft_as_large_as_its_target_is_reported_as_a_slowdown_at_every_concurrency(
        llamacpp_baseline, llamacpp_draft, tmp_path):
    res = tokenswarm_cli("compare", str(ran(llamacpp_baseline)), str(ran(llamacpp_draft)), "--no-plots",
                         "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = [r for r in json.loads((tmp_path / "summary.json").read_text())["rows"] if r["task"] == "all"]
    assert [r["step_name"] for r in rows] == ["c1", "c4"]
    for r in rows:
        # tolerance: none; a ratio of 1.0 or more means a gain was reported where none can be
        assert r["output_tokens_per_s_speedup_ratio"] < 1.0, (
            f"step {r['step_name']}: speedup {r['output_tokens_per_s_speedup_ratio']:.3f} reported for a draft as "
            f"large as its target (needs a machine idle during both runs)", r)

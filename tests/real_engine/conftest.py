"""Session fixtures for the real-engine tests: the tiny model, built once, and one run of each
vLLM server (baseline, then n-gram speculative), each started once and stopped before the
fixture returns, so no two servers ever run at the same time."""

from __future__ import annotations

import pytest

from tests.real_engine.vllm_runs import EngineRuns, serve_and_run


@pytest.fixture(scope="session")
def engine_model_dir(tmp_path_factory):
    """The default test model (``tokenswarm make-test-model`` defaults), in a session temp dir."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from tokenswarm.testmodel.build import build_test_model

    out = tmp_path_factory.mktemp("engine-model")
    build_test_model(out)
    return out


@pytest.fixture(scope="session")
def baseline_engine(engine_model_dir, tmp_path_factory) -> EngineRuns:
    """Every baseline run (no speculation): per-class, comparison and error scenarios."""
    return serve_and_run(engine_model_dir, tmp_path_factory.mktemp("baseline"), speculative=False,
                         names=("classes", "compare", "errors"))


@pytest.fixture(scope="session")
def ngram_engine(engine_model_dir, tmp_path_factory) -> EngineRuns:
    """The same scenarios (errors excepted: the API server rejects them before any engine step)
    against the n-gram speculative server."""
    return serve_and_run(engine_model_dir, tmp_path_factory.mktemp("ngram"), speculative=True,
                         names=("classes", "compare"))

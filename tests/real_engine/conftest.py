"""Session fixtures for the real-engine tests: the tiny model, built once (and exported once as
GGUF), and one set of runs per server (vLLM baseline and n-gram speculative; llama.cpp baseline
and draft-model speculative), each server started once and stopped before its fixture returns,
so no two servers ever run at the same time."""

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


@pytest.fixture(scope="session")
def engine_gguf(engine_model_dir):
    """The same test model as one GGUF file, for llama.cpp's server."""
    pytest.importorskip("gguf")
    from tokenswarm.testmodel.gguf_export import export_gguf

    return export_gguf(engine_model_dir)


@pytest.fixture(scope="session")
def llamacpp_baseline(engine_gguf, tmp_path_factory):
    """Every llama.cpp run without speculation (server started and stopped inside)."""
    from tests.real_engine.llamacpp_runs import serve_and_run as serve_llamacpp

    return serve_llamacpp(engine_gguf, tmp_path_factory.mktemp("llamacpp-baseline"), speculative=False)


@pytest.fixture(scope="session")
def llamacpp_draft(engine_gguf, tmp_path_factory):
    """The same runs against llama.cpp speculating with the model as its own draft."""
    from tests.real_engine.llamacpp_runs import serve_and_run as serve_llamacpp

    return serve_llamacpp(engine_gguf, tmp_path_factory.mktemp("llamacpp-draft"), speculative=True)

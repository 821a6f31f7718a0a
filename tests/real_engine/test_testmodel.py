"""The tiny local Llama test model: files, shapes, shaped greedy behaviour. That a real vLLM
serves it identically with and without n-gram speculation is in test_vllm_runs.py, beside the
other tests of the same two servers (one test file: parallel workers start them once)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from safetensors.numpy import load_file
from tokenizers import Tokenizer

from tokenswarm.cli import main as tokenswarm_main
from tokenswarm.testmodel import reference
from tokenswarm.testmodel.build import (
    MANIFEST_NAME,
    MODEL_FILES,
    ModelSpec,
    build_test_model,
    greedy_chain,
    load_manifest,
)
from tokenswarm.testmodel.server import (
    NGRAM_SPECULATIVE_CONFIG,
    VllmStartError,
    vllm_command,
    wait_until_healthy,
)
from tokenswarm.testmodel.tokenizer import SPECIAL_TOKENS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("testmodel")
    build_test_model(out, ModelSpec(seed=7))
    return out


def _config(model_dir) -> dict:
    return json.loads((model_dir / "config.json").read_text())


def test_directory_holds_a_loadable_llama_checkpoint(model_dir):
    for name in (*MODEL_FILES, MANIFEST_NAME):
        assert (model_dir / name).is_file(), name
    config = _config(model_dir)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]
    assert config["head_dim"] == 64
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert not {"temperature", "top_p", "top_k"} & set(generation), "would override request sampling in vLLM"


def test_weight_shapes_and_dtype_match_the_config(model_dir):
    config = _config(model_dir)
    tensors = load_file(str(model_dir / "model.safetensors"))
    v, h, i = config["vocab_size"], config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    expected = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "model.norm.weight": (h,)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        expected |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        }
    assert {k: t.shape for k, t in tensors.items()} == expected
    assert {str(t.dtype) for t in tensors.values()} == {config["torch_dtype"]}


def test_tokenizer_matches_config_and_renders_the_chat_template(model_dir):
    jinja2 = pytest.importorskip("jinja2")
    config = _config(model_dir)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tok.get_vocab_size() == config["vocab_size"]
    assert tok.token_to_id(tok_config["bos_token"]) == config["bos_token_id"]
    assert tok.token_to_id(tok_config["eos_token"]) == config["eos_token_id"]
    prompt = jinja2.Template(tok_config["chat_template"]).render(
        messages=[{"role": "user", "content": "What is a generator?"}],
        add_generation_prompt=True, bos_token=tok_config["bos_token"], eos_token=tok_config["eos_token"],
    )
    assert prompt == "<s><|user|>\nWhat is a generator?</s>\n<|assistant|>\n"
    ids = tok.encode(prompt, add_special_tokens=False).ids
    assert ids[0] == config["bos_token_id"] and tok.token_to_id("<|assistant|>") in ids
    code = "def f(x):\n    return x"
    assert tok.decode(tok.encode(code, add_special_tokens=False).ids) == code


def test_successor_map_is_short_cycles_over_printable_tokens(model_dir):
    manifest = load_manifest(model_dir)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    succ = manifest["successor"]
    special = {tok.token_to_id(t) for t in SPECIAL_TOKENS}
    targets = set(succ)
    assert not targets & special, "greedy decoding must never emit a special token"
    for t in targets:
        text = tok.decode([t])
        assert text.isascii() and text.isprintable(), (t, text)
    spec = manifest["spec"]
    for start in sorted(targets)[:50]:
        seen, t = [start], succ[start]
        while t != start:
            seen.append(t)
            t = succ[t]
            assert len(seen) <= spec["cycle_len_max"] + 1, f"token {start} is not on a short cycle"
        assert len(seen) >= 2


def test_greedy_decoding_of_the_full_network_follows_the_successor_chain(model_dir):
    config = _config(model_dir)
    tensors = load_file(str(model_dir / "model.safetensors"))
    manifest = load_manifest(model_dir)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    chat = "<s><|user|>\nSummarise: the quick brown fox.</s>\n<|assistant|>\n"
    prompt = tok.encode(chat, add_special_tokens=False).ids
    generated = reference.greedy_generate(tensors, config, prompt, 24)
    assert generated == greedy_chain(manifest["successor"], prompt[-1], 24)
    period = generated[1:].index(generated[0]) + 1
    assert period <= manifest["spec"]["cycle_len_max"]
    assert generated[period:] == generated[: len(generated) - period], "output repeats with the cycle period"


def test_temperature_one_leaves_the_successor_a_moderate_share(model_dir):
    p = load_manifest(model_dir)["successor_p_at_t1"]
    assert 0.3 <= p["median"] <= 0.9, p


def test_same_seed_same_weights_other_seed_other_weights(model_dir, tmp_path):
    build_test_model(tmp_path / "same", ModelSpec(seed=7))
    build_test_model(tmp_path / "other", ModelSpec(seed=8))
    ours = (model_dir / "model.safetensors").read_bytes()
    assert (tmp_path / "same" / "model.safetensors").read_bytes() == ours
    assert (tmp_path / "other" / "model.safetensors").read_bytes() != ours
    assert load_manifest(tmp_path / "same")["successor"] == load_manifest(model_dir)["successor"]


def test_float16_option_writes_float16_weights(tmp_path):
    build_test_model(tmp_path, ModelSpec(dtype="float16", hidden_size=64, num_layers=1))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert {t.dtype for t in tensors.values()} == {np.dtype("float16")}
    assert _config(tmp_path)["torch_dtype"] == "float16"


def test_cli_builds_refuses_to_overwrite_and_rejects_bad_sizes(tmp_path, capsys):
    out = tmp_path / "m"
    small = ["--vocab-size", "1024", "--hidden", "64", "--layers", "1"]
    assert tokenswarm_main(["make-test-model", str(out), *small]) == 0
    assert _config(out)["vocab_size"] == 1024 and _config(out)["num_hidden_layers"] == 1
    assert tokenswarm_main(["make-test-model", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert tokenswarm_main(["make-test-model", str(tmp_path / "bad"), "--hidden", "100"]) == 2
    assert "hidden_size 100" in capsys.readouterr().err


def test_server_command_adds_ngram_speculation_only_when_asked():
    base = vllm_command("/m", port=8123, speculative=False, python="py")
    spec = vllm_command("/m", port=8123, speculative=True, python="py", extra_args=["--seed", "1"])
    assert base[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--speculative-config" not in base and "--enforce-eager" in base
    config = json.loads(spec[spec.index("--speculative-config") + 1])
    assert config == NGRAM_SPECULATIVE_CONFIG and config["method"] == "ngram"
    assert spec[-2:] == ["--seed", "1"]


def test_vllm_availability_is_asked_of_the_named_interpreter(tmp_path):
    from tokenswarm.testmodel.server import vllm_available

    def fake_python(name: str, status: int) -> str:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\nexit {status}\n")
        path.chmod(0o755)
        return str(path)

    assert vllm_available(fake_python("has-vllm", 0)) is True
    assert vllm_available(fake_python("no-vllm", 1)) is False
    assert vllm_available(str(tmp_path / "missing-python")) is False


def test_a_server_that_dies_at_start_up_raises_with_its_log(model_dir, tmp_path):
    from tokenswarm.testmodel.server import start_vllm

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'engine core failed: no such op' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(VllmStartError) as err:
        start_vllm(model_dir, speculative=False, python=str(fake), timeout_s=30, log_path=tmp_path / "v.log")
    assert "exited with status 3" in str(err.value)
    assert "engine core failed: no such op" in str(err.value)


class FakeClock:
    def __init__(self):
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def test_health_wait_returns_once_the_server_answers_200():
    clock = FakeClock()
    statuses = iter([None, None, 503, 200])
    waited_s = wait_until_healthy(
        "u", lambda: None, timeout_s=60, interval_s=1.0, get_status=lambda _u: next(statuses),
        clock=clock, sleep=clock.sleep,
    )
    assert waited_s == 3.0


def test_health_wait_fails_fast_when_the_process_exits_and_after_the_timeout():
    clock = FakeClock()
    exits = iter([None, None, 1])
    with pytest.raises(VllmStartError, match="exited with status 1"):
        wait_until_healthy("u", lambda: next(exits), timeout_s=60, get_status=lambda _u: None,
                           clock=clock, sleep=clock.sleep)
    with pytest.raises(VllmStartError, match="not healthy .* after 10 s"):
        wait_until_healthy("u", lambda: None, timeout_s=10, get_status=lambda _u: None,
                           clock=clock, sleep=clock.sleep)


# --- against a real vLLM (opt-in: needs vllm importable here or via $TOKENSWARM_VLLM_PYTHON) ---
# The servers are started once per session by tests/real_engine/conftest.py, which probes each
# with one greedy streamed answer (token ids and chunk sizes) before its Locust runs.

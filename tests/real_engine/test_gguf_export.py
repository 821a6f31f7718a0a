"""The test model's GGUF export (tokenswarm/testmodel/gguf_export.py): llama.cpp reads the
same model vLLM reads. Runs without any engine: the file is read back with gguf's own reader,
and the RoPE permutation is checked against both RoPE conventions numerically."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

from gguf import GGUFReader
from safetensors.numpy import load_file

from tokenswarm.cli import main as tokenswarm_main
from tokenswarm.testmodel.gguf_export import gguf_tensors, permute_for_rope


def rope_rotate_half(x: np.ndarray, pos: int, theta: float = 10000.0) -> np.ndarray:
    """Hugging Face Llama: dimension i turns with i + d/2."""
    d = x.shape[-1]
    freqs = theta ** (-np.arange(0, d, 2) / d) * pos
    cos, sin = np.cos(np.concatenate([freqs, freqs])), np.sin(np.concatenate([freqs, freqs]))
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * cos + rotated * sin


def rope_interleaved(x: np.ndarray, pos: int, theta: float = 10000.0) -> np.ndarray:
    """GGUF llama (original Meta layout): dimension 2i turns with 2i + 1."""
    d = x.shape[-1]
    freqs = theta ** (-np.arange(0, d, 2) / d) * pos
    cos, sin = np.cos(freqs), np.sin(freqs)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def test_permuted_q_and_k_give_the_same_attention_scores_under_llama_cpp_s_rope():
    rng = np.random.default_rng(3)
    heads, head_dim, hidden = 2, 8, 16
    wq, wk = rng.standard_normal((heads * head_dim, hidden)), rng.standard_normal((heads * head_dim, hidden))
    x_q, x_k = rng.standard_normal(hidden), rng.standard_normal(hidden)
    pq, pk = permute_for_rope(wq, heads), permute_for_rope(wk, heads)
    for head in range(heads):
        rows = slice(head * head_dim, (head + 1) * head_dim)
        for pos_q, pos_k in ((0, 0), (5, 2), (17, 9)):
            hf = rope_rotate_half(wq[rows] @ x_q, pos_q) @ rope_rotate_half(wk[rows] @ x_k, pos_k)
            gg = rope_interleaved(pq[rows] @ x_q, pos_q) @ rope_interleaved(pk[rows] @ x_k, pos_k)
            assert gg == pytest.approx(hf, rel=1e-9, abs=1e-9)


def test_make_test_model_gguf_writes_the_same_weights_and_vocabulary(tmp_path, capsys):
    assert tokenswarm_main(["make-test-model", str(tmp_path), "--gguf"]) == 0
    assert "model.gguf" in capsys.readouterr().out
    reader = GGUFReader(str(tmp_path / "model.gguf"))
    fields = reader.fields

    def value(key: str):
        f = fields[key]
        return f.contents()

    import json

    config = json.loads((tmp_path / "config.json").read_text())
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    assert value("general.architecture") == "llama"
    assert value("llama.block_count") == config["num_hidden_layers"]
    assert value("llama.embedding_length") == config["hidden_size"]
    assert value("llama.attention.head_count") == config["num_attention_heads"]
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "gpt-2"
    tokens = value("tokenizer.ggml.tokens")
    assert len(tokens) == config["vocab_size"]
    assert all(tokens[i] == t for t, i in tok["model"]["vocab"].items())
    assert value("tokenizer.ggml.bos_token_id") == config["bos_token_id"]
    assert value("tokenizer.ggml.eos_token_id") == config["eos_token_id"]
    types = value("tokenizer.ggml.token_type")
    assert [types[i] for i in range(5)] == [3] * 5  # <s>, </s> and the role tokens are control
    assert "<|assistant|>" in value("tokenizer.chat_template")

    hf = load_file(str(tmp_path / "model.safetensors"))
    expected = gguf_tensors(hf, config)
    read = {t.name: np.asarray(t.data).reshape(tuple(reversed([int(n) for n in t.shape]))) for t in reader.tensors}
    assert set(read) == set(expected) and len(read) == 3 + 9 * config["num_hidden_layers"]
    for name, array in expected.items():
        np.testing.assert_array_equal(read[name], array, err_msg=name)
    np.testing.assert_array_equal(read["token_embd.weight"], hf["model.embed_tokens.weight"])
    np.testing.assert_array_equal(read["blk.0.attn_v.weight"], hf["model.layers.0.self_attn.v_proj.weight"])
    assert not np.array_equal(read["blk.0.attn_q.weight"], hf["model.layers.0.self_attn.q_proj.weight"])

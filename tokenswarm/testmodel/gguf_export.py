"""Write the tiny test model as one GGUF file, for llama.cpp's server.

The input is a model directory made by :func:`tokenswarm.testmodel.build.build_test_model`
(Hugging Face layout: ``config.json``, ``model.safetensors``, ``tokenizer.json``); the output
is the same weights and the same byte-level BPE vocabulary in llama.cpp's format, written
with the ``gguf`` package from PyPI (llama.cpp's own writer). Nothing is downloaded, and the
greedy successor chain of the build manifest holds for both engines, so a test can predict
llama.cpp's answers exactly as it predicts vLLM's.

Two things differ from the Hugging Face files, both as llama.cpp's converter does them:

* Q and K projections are permuted from Hugging Face's rotate-half RoPE layout back to the
  interleaved layout llama.cpp's ``llama`` architecture expects (:func:`permute_for_rope`);
* the vocabulary is a list in id order with a type per token (special tokens are CONTROL),
  and the merges are ``"left right"`` strings; the pre-tokenizer is GPT-2's, which is what
  the Hugging Face tokenizer's ``ByteLevel`` pre-tokenizer (with its regex) splits by.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: Hugging Face tensor name (per layer, after ``model.layers.N.``) -> GGUF name (after ``blk.N.``).
_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def permute_for_rope(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder a Q or K projection's rows from rotate-half to interleaved RoPE pairs.

    Hugging Face's Llama rotates dimension ``i`` with ``i + head_dim/2`` of each head; the
    GGUF ``llama`` architecture rotates ``2i`` with ``2i + 1``. Rows are regrouped per head so
    both compute the same attention (the same permutation as llama.cpp's converter).
    """
    rows = weight.shape[0]
    return (weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2)
            .reshape(weight.shape))


def gguf_tensors(tensors: dict[str, np.ndarray], config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The Hugging Face tensors renamed (and Q/K permuted) for GGUF, as float32 arrays."""
    out: dict[str, np.ndarray] = {}
    for hf_name, array in tensors.items():
        array = np.ascontiguousarray(array, dtype=np.float32)
        if hf_name in _GLOBAL_TENSORS:
            out[_GLOBAL_TENSORS[hf_name]] = array
            continue
        prefix, _, rest = hf_name.partition(".layers.")
        layer, _, suffix = rest.partition(".")
        if prefix != "model" or suffix not in _LAYER_TENSORS:
            raise ValueError(f"tensor {hf_name!r} has no GGUF name in this exporter")
        if suffix == "self_attn.q_proj.weight":
            array = permute_for_rope(array, config["num_attention_heads"])
        elif suffix == "self_attn.k_proj.weight":
            array = permute_for_rope(array, config["num_key_value_heads"])
        out[f"blk.{int(layer)}.{_LAYER_TENSORS[suffix]}"] = np.ascontiguousarray(array)
    return out


def gguf_vocab(tokenizer_json: dict[str, Any]) -> tuple[list[str], list[int], list[str]]:
    """(tokens in id order, their GGUF token types, merges as ``"a b"``) of a BPE tokenizer.json."""
    from gguf import TokenType  # optional dependency (gguf): only to export

    model = tokenizer_json["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer.json model type {model.get('type')!r}: only BPE is exported")
    vocab: dict[str, int] = dict(model["vocab"])
    special = {t["content"] for t in tokenizer_json.get("added_tokens", []) if t.get("special")}
    for added in tokenizer_json.get("added_tokens", []):
        vocab.setdefault(added["content"], added["id"])
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ValueError("tokenizer.json ids are not 0..n-1 without gaps")
    tokens = [t for t, _ in by_id]
    types = [int(TokenType.CONTROL if t in special else TokenType.NORMAL) for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def export_gguf(model_dir: str | Path, out_path: str | Path | None = None) -> Path:
    """Write ``model_dir``'s model as GGUF (default ``model_dir/model.gguf``) and return the path."""
    import gguf  # optional dependency (gguf): only to export
    from safetensors.numpy import load_file  # optional dependency (safetensors): only to export

    model_dir = Path(model_dir)
    out = Path(out_path) if out_path is not None else model_dir / "model.gguf"
    config = json.loads((model_dir / "config.json").read_text())
    tok_json = json.loads((model_dir / "tokenizer.json").read_text())
    tok_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    if config.get("model_type") != "llama":
        raise ValueError(f"{model_dir / 'config.json'}: model_type {config.get('model_type')!r}, expected 'llama'")

    tokens, types, merges = gguf_vocab(tok_json)
    writer = gguf.GGUFWriter(str(out), arch="llama")
    writer.add_name("tokenswarm test model")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(config["vocab_size"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_add_bos_token(bool(tok_config.get("add_bos_token", True)))
    if tok_config.get("chat_template"):
        writer.add_chat_template(tok_config["chat_template"])

    for name, array in gguf_tensors(load_file(str(model_dir / "model.safetensors")), config).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out

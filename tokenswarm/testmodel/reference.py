"""A plain numpy forward pass of a Hugging Face Llama checkpoint (for checking the test model).

Independent of vLLM: it follows the Llama definition (RMSNorm, rotary embeddings in the
"rotate half" layout, grouped-query causal attention, SiLU-gated MLP), so a test can confirm
that the shaped weights really decode greedily along the successor map with every block
active, not only under the construction's approximation.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    normed: np.ndarray = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * weight
    return normed


def _rope(x: np.ndarray, theta: float) -> np.ndarray:
    """Rotary embedding for ``x`` shaped (heads, seq, head_dim), positions 0..seq-1."""
    seq, dim = x.shape[1], x.shape[2]
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv_freq)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)
    half = dim // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    out: np.ndarray = x * cos + rotated * sin
    return out


def logits(tensors: dict[str, np.ndarray], config: dict[str, Any], token_ids: list[int]) -> np.ndarray:
    """Next-token logits (seq, vocab) for every position of ``token_ids``."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    eps = float(config["rms_norm_eps"])
    n_heads, n_kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // n_heads)
    theta = float(config.get("rope_theta", 10000.0))
    seq = len(token_ids)
    x = t["model.embed_tokens.weight"][token_ids]
    causal = np.triu(np.full((seq, seq), -np.inf), k=1)
    for layer in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{layer}."
        h = _rms_norm(x, t[p + "input_layernorm.weight"], eps)
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(seq, n_heads, head_dim).transpose(1, 0, 2)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(seq, n_kv, head_dim).transpose(1, 0, 2)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(seq, n_kv, head_dim).transpose(1, 0, 2)
        q, k = _rope(q, theta), _rope(k, theta)
        group = n_heads // n_kv
        k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + causal
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = (scores @ v).transpose(1, 0, 2).reshape(seq, n_heads * head_dim)
        x = x + attn @ t[p + "self_attn.o_proj.weight"].T
        h = _rms_norm(x, t[p + "post_attention_layernorm.weight"], eps)
        gate = h @ t[p + "mlp.gate_proj.weight"].T
        up = h @ t[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ t[p + "mlp.down_proj.weight"].T
    x = _rms_norm(x, t["model.norm.weight"], eps)
    return x @ t["lm_head.weight"].T


def greedy_generate(
    tensors: dict[str, np.ndarray], config: dict[str, Any], prompt_ids: list[int], max_tokens: int
) -> list[int]:
    """Greedy continuation of ``prompt_ids`` (recomputes the whole sequence each step: test use only)."""
    ids = list(prompt_ids)
    out: list[int] = []
    for _ in range(max_tokens):
        nxt = int(np.argmax(logits(tensors, config, ids)[-1]))
        ids.append(nxt)
        out.append(nxt)
    return out

"""Shaped (not trained) Llama weights whose greedy output follows a fixed successor map.

Construction, for hidden size ``H``:

* every token ``t`` gets a random embedding ``e_t`` with RMS 1 (norm ``sqrt(H)``);
* attention and MLP weights are small random matrices, so each block adds only a few percent
  to the residual stream, which stays dominated by the current token's embedding (the blocks
  still do real work: vLLM runs attention over a real KV cache);
* the language-model head row of token ``s`` is ``logit_scale / sqrt(H)`` times the unit
  embedding of every token whose successor is ``s``.

After the final RMSNorm the hidden state is about ``sqrt(H) * e_t/|e_t|``, so the successor's
logit is about ``logit_scale`` while every other logit is ``logit_scale * cos(e_t, e_u)``, a
cosine between random vectors (standard deviation ``1/sqrt(H)``). Greedy decoding is therefore
``t -> succ(t)`` with a wide margin, and at temperature 1 the successor gets only a moderate
share of probability (see :func:`successor_probability`), so sampling leaves the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Standard deviation of the attention and MLP matrices: small enough that the residual stream
#: stays close to the current token's embedding through every layer.
BLOCK_WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Shape:
    """Dimensions of the Llama model."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int


def successor_map(
    vocab_size: int, cycle_ids: list[int], rng: np.random.Generator, *, cycle_len_min: int, cycle_len_max: int
) -> np.ndarray:
    """Return ``succ`` (int array of length ``vocab_size``): the greedy next token of each token.

    ``cycle_ids`` are split, in random order, into cycles of ``cycle_len_min..cycle_len_max``
    tokens (the last cycle may be shorter but has at least 2). Every other token (special or
    non-printable ones) points into a cycle, spread so that no cycle token gets more than one
    such extra predecessor while enough cycle tokens exist. No token's successor is outside
    ``cycle_ids``, so greedy decoding never emits EOS or a special token.
    """
    if len(cycle_ids) < 2 * cycle_len_max:
        raise ValueError(
            f"need at least {2 * cycle_len_max} printable tokens for cycles, got {len(cycle_ids)}"
        )
    order = [int(i) for i in rng.permutation(np.asarray(cycle_ids))]
    succ = np.full(vocab_size, -1, dtype=np.int64)
    pos = 0
    while pos < len(order):
        length = int(rng.integers(cycle_len_min, cycle_len_max + 1))
        if len(order) - (pos + length) < 2:  # avoid a trailing cycle of one token (a fixed point)
            length = len(order) - pos
        cycle = order[pos : pos + length]
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            succ[a] = b
        pos += length
    others = [t for t in range(vocab_size) if succ[t] < 0]
    targets = [int(i) for i in rng.permutation(np.asarray(cycle_ids))]
    for k, t in enumerate(others):
        succ[t] = targets[k % len(targets)]
    return succ


def make_weights(
    shape: Shape, succ: np.ndarray, rng: np.random.Generator, *, logit_scale: float
) -> dict[str, np.ndarray]:
    """Return float32 tensors named as in Hugging Face's ``LlamaForCausalLM`` checkpoints."""
    v, h = shape.vocab_size, shape.hidden_size
    embed = rng.standard_normal((v, h)).astype(np.float64)
    embed /= np.sqrt(np.mean(embed**2, axis=1, keepdims=True))  # RMS 1 per token
    unit = embed / np.linalg.norm(embed, axis=1, keepdims=True)
    lm_head = np.zeros((v, h), dtype=np.float64)
    np.add.at(lm_head, succ, unit * (logit_scale / np.sqrt(h)))

    def block(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * BLOCK_WEIGHT_STD).astype(np.float32)

    q_dim = shape.num_heads * shape.head_dim
    kv_dim = shape.num_kv_heads * shape.head_dim
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": embed.astype(np.float32),
        "model.norm.weight": np.ones(h, dtype=np.float32),
        "lm_head.weight": lm_head.astype(np.float32),
    }
    for layer in range(shape.num_layers):
        p = f"model.layers.{layer}."
        tensors[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
        tensors[p + "self_attn.q_proj.weight"] = block(q_dim, h)
        tensors[p + "self_attn.k_proj.weight"] = block(kv_dim, h)
        tensors[p + "self_attn.v_proj.weight"] = block(kv_dim, h)
        tensors[p + "self_attn.o_proj.weight"] = block(h, q_dim)
        tensors[p + "mlp.gate_proj.weight"] = block(shape.intermediate_size, h)
        tensors[p + "mlp.up_proj.weight"] = block(shape.intermediate_size, h)
        tensors[p + "mlp.down_proj.weight"] = block(h, shape.intermediate_size)
    return tensors


def successor_probability(
    tensors: dict[str, np.ndarray], succ: np.ndarray, token_ids: list[int]
) -> np.ndarray:
    """Probability of ``succ[t]`` at temperature 1, for each ``t`` in ``token_ids``.

    Uses the residual-stream approximation (hidden state = normalised embedding of ``t``), which
    is what the construction guarantees up to the small block contributions.
    """
    embed = tensors["model.embed_tokens.weight"].astype(np.float64)[token_ids]
    hidden = embed / np.sqrt(np.mean(embed**2, axis=1, keepdims=True))
    logits = hidden @ tensors["lm_head.weight"].astype(np.float64).T
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    picked: np.ndarray = probs[np.arange(len(token_ids)), succ[token_ids]]
    return picked

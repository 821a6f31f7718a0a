"""Write a tiny Llama model directory that vLLM (and Hugging Face transformers) can load."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokenswarm.testmodel import tokenizer as tk
from tokenswarm.testmodel.weights import Shape, make_weights, successor_map, successor_probability

#: File in the model directory describing how it was built, with the successor map
#: (vLLM ignores it; tests use it to predict greedy output).
MANIFEST_NAME = "tokenswarm_testmodel.json"
MANIFEST_FORMAT_VERSION = 1
#: Files a model directory contains, besides the manifest.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
_DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class ModelSpec:
    """What to build. Defaults start in well under a minute on 2 CPU cores."""

    vocab_size: int = 2048
    hidden_size: int = 128
    num_layers: int = 2
    head_dim: int = 64  # vLLM's CPU attention supports a fixed set of head sizes; 64 is one
    seed: int = 0
    #: Successor logit at temperature 1, in nats above a typical other token: sets how often
    #: sampling leaves the cycle (8.5 gives the successor about 60% at vocab 2048, hidden 128).
    logit_scale: float = 8.5
    cycle_len_min: int = 4
    cycle_len_max: int = 10
    max_position_embeddings: int = 4096
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise ValueError naming the bad field."""
        if self.hidden_size < self.head_dim or self.hidden_size % self.head_dim:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be a positive multiple of head_dim {self.head_dim}"
            )
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if not 2 <= self.cycle_len_min <= self.cycle_len_max:
            raise ValueError(
                f"need 2 <= cycle_len_min <= cycle_len_max, got {self.cycle_len_min}..{self.cycle_len_max}"
            )
        if self.logit_scale <= 0:
            raise ValueError(f"logit_scale must be > 0, got {self.logit_scale}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")

    def shape(self) -> Shape:
        heads = self.hidden_size // self.head_dim
        return Shape(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=self.head_dim,
            intermediate_size=2 * self.hidden_size,
        )


def llama_config(shape: Shape, spec: ModelSpec, *, bos_id: int, eos_id: int) -> dict[str, Any]:
    """``config.json`` contents for ``LlamaForCausalLM``."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": eos_id,
        "torch_dtype": spec.dtype,
    }


def build_test_model(out_dir: str | Path, spec: ModelSpec = ModelSpec(), *, overwrite: bool = False) -> dict[str, Any]:
    """Build the model into ``out_dir`` (created if missing) and return its manifest.

    Refuses to write into a directory that already holds a ``config.json`` unless
    ``overwrite``. The same spec (seed included) always gives the same weights.
    """
    from safetensors.numpy import save_file  # optional dependency (safetensors): only to build a model

    spec.validate()
    out = Path(out_dir)
    if (out / "config.json").exists() and not overwrite:
        raise FileExistsError(
            f"{out / 'config.json'} exists; pass overwrite=True (--force) to replace the model"
        )
    out.mkdir(parents=True, exist_ok=True)

    tok = tk.train_tokenizer(spec.vocab_size)
    vocab_size = tok.get_vocab_size()  # the trainer may stop short on a small corpus
    spec_used = ModelSpec(**{**asdict(spec), "vocab_size": vocab_size})
    shape = spec_used.shape()
    bos_id, eos_id = tok.token_to_id(tk.BOS), tok.token_to_id(tk.EOS)
    assert bos_id is not None and eos_id is not None  # special tokens the tokenizer was trained with

    rng = np.random.default_rng(spec.seed)
    cycle_ids = tk.clean_token_ids(tok)
    succ = successor_map(
        vocab_size, cycle_ids, rng, cycle_len_min=spec.cycle_len_min, cycle_len_max=spec.cycle_len_max
    )
    tensors = make_weights(shape, succ, rng, logit_scale=spec.logit_scale)
    p_succ = successor_probability(tensors, succ, cycle_ids)
    dtype = _DTYPES[spec.dtype]
    save_file(
        {k: v.astype(dtype) for k, v in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},  # what transformers expects of a PyTorch checkpoint
    )

    config = llama_config(shape, spec_used, bos_id=bos_id, eos_id=eos_id)
    _write_json(out / "config.json", config)
    # Only token ids: sampling defaults here would silently override request parameters in vLLM.
    generation = {"bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": eos_id}
    _write_json(out / "generation_config.json", generation)
    tk.save_tokenizer(tok, out, model_max_length=spec.max_position_embeddings)

    manifest = {
        "format_version": MANIFEST_FORMAT_VERSION,
        "spec": asdict(spec_used),
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "cycle_token_count": len(cycle_ids),
        "successor_p_at_t1": {
            "mean": round(float(p_succ.mean()), 4),
            "median": round(float(np.median(p_succ)), 4),
            "min": round(float(p_succ.min()), 4),
            "max": round(float(p_succ.max()), 4),
        },
        "successor": [int(s) for s in succ],
    }
    _write_json(out / MANIFEST_NAME, manifest)
    return manifest


def load_manifest(model_dir: str | Path) -> dict[str, Any]:
    """Read the build manifest of a model directory made by :func:`build_test_model`."""
    path = Path(model_dir) / MANIFEST_NAME
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} not found: {model_dir} was not built by 'tokenswarm make-test-model'"
        ) from None
    if manifest.get("format_version") != MANIFEST_FORMAT_VERSION:
        raise ValueError(f"{path}: unknown format_version {manifest.get('format_version')!r}")
    return manifest


def greedy_chain(successor: list[int], last_prompt_token: int, max_tokens: int) -> list[int]:
    """The token ids greedy decoding produces after a prompt ending in ``last_prompt_token``."""
    out, token = [], last_prompt_token
    for _ in range(max_tokens):
        token = successor[token]
        out.append(token)
    return out


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")

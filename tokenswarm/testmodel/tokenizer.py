"""Train a small byte-level BPE tokenizer locally and save it as a Hugging Face fast tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an optional dependency (the testmodel extra), imported where it is used
    from tokenizers import Tokenizer

#: Special tokens, in id order (they get ids 0..n-1).
BOS = "<s>"
EOS = "</s>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (BOS, EOS, *ROLE_TOKENS)

#: Jinja chat template: ``<s><|user|>\nHi</s>\n<|assistant|>\n``. vLLM renders it and then
#: tokenizes without adding special tokens, so the template writes ``<s>`` itself.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def training_corpus() -> list[str]:
    """Text of the Python documentation topics shipped with the stdlib (no download)."""
    from pydoc_data.topics import topics  # a large module: only when a tokenizer is trained

    return [topics[key] for key in sorted(topics)]


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE tokenizer with ``vocab_size`` entries (special tokens included).

    Returns a ``tokenizers.Tokenizer``. Byte-level BPE can encode any text, so prompts from any
    load scenario are accepted.
    """
    # optional dependency (tokenizers): only to train
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if vocab_size < 512:
        raise ValueError(f"--vocab-size must be at least 512 (256 byte tokens + merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer)
    bos_id = tok.token_to_id(BOS)
    # Completions requests are tokenized with special tokens: prepend <s> like Llama does.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: Path, *, model_max_length: int) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    tok.save(str(out_dir / "tokenizer.json"))
    added = {
        str(tok.token_to_id(t)): {
            "content": t, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special_map = {"bos_token": BOS, "eos_token": EOS, "pad_token": EOS}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")


def clean_token_ids(tok: Tokenizer) -> list[int]:
    """Ids of tokens that decode, on their own, to printable ASCII text.

    Only these take part in the successor cycles, so streamed text never contains half a UTF-8
    character or control bytes (which a detokenizer would hold back, blurring chunk sizes).
    """
    special = {tok.token_to_id(t) for t in SPECIAL_TOKENS}
    ids = []
    for token_id in range(tok.get_vocab_size()):
        if token_id in special:
            continue
        text = tok.decode([token_id])
        if text and text.isascii() and text.isprintable() and text.strip():
            ids.append(token_id)
    return ids

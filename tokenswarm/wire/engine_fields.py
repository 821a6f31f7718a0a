"""Per-request fields that differ between engines, read into one shape (pure helpers).

Speculative decoding per request arrives in three dialects; :func:`spec_decode_of` turns each
into vLLM's ``metrics.speculative_decoding`` names (``num_spec_steps``,
``num_accepted_draft_tokens``, ``num_draft_tokens``, ``mean_acceptance_length``,
``acceptance_histogram``) plus ``source``, so ``record.spec_decode`` and the analysis
tables read every engine the same way:

* vLLM (``--per-request-spec-decode-metrics``): ``metrics.speculative_decoding``, as is;
* llama.cpp's server: ``timings.draft_n`` / ``timings.draft_n_accepted`` in the final chunk.
  It has no verify-step count: ``num_spec_steps`` is estimated as ``predicted_n -
  draft_n_accepted`` (each round emits its accepted drafts plus one token) and marked
  ``num_spec_steps_estimated``;
* SGLang (``return_spec_tokens_details``): ``sglext.spec_tokens_details`` with
  ``spec_verify_ct``, ``spec_num_correct_drafts`` / ``spec_num_proposed_drafts`` (older:
  ``spec_accept_token_num`` / ``spec_draft_token_num``), ``spec_accept_length`` and
  ``spec_correct_drafts_histogram``.

:func:`one_token_per_event` is the tokens-per-chunk inference: when a request's number of
content events equals its ``usage.completion_tokens``, every event carried exactly one token
(each content event carries at least one), so the per-chunk counts are known exactly.
"""

from __future__ import annotations

from typing import Any


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v


def llamacpp_spec_decode(timings: Any) -> dict[str, Any] | None:
    """llama.cpp ``timings`` -> vLLM-shaped spec-decode dict; ``None`` without drafts."""
    if not isinstance(timings, dict):
        return None
    drafted, accepted = _num(timings.get("draft_n")), _num(timings.get("draft_n_accepted"))
    if not drafted or accepted is None:
        return None  # the server adds draft_n only when it drafted
    out: dict[str, Any] = {"source": "llama.cpp timings", "num_draft_tokens": int(drafted),
                           "num_accepted_draft_tokens": int(accepted),
                           "draft_acceptance_rate": accepted / drafted}
    predicted = _num(timings.get("predicted_n"))
    if predicted is not None and predicted > accepted:
        steps = int(predicted - accepted)
        out["num_spec_steps"] = steps
        out["num_spec_steps_estimated"] = True
        out["mean_acceptance_length"] = predicted / steps
    return out


def sglang_spec_decode(sglext: Any) -> dict[str, Any] | None:
    """SGLang ``sglext`` (``spec_tokens_details``) -> vLLM-shaped spec-decode dict."""
    if isinstance(sglext, list):  # one entry per choice when n > 1
        sglext = sglext[0] if sglext else None
    if not isinstance(sglext, dict):
        return None
    d = sglext.get("spec_tokens_details", sglext)
    if not isinstance(d, dict):
        return None
    steps = _num(d.get("spec_verify_ct"))
    acc = _num(d.get("spec_num_correct_drafts", d.get("spec_accepted_drafts", d.get("spec_accept_token_num"))))
    draft = _num(d.get("spec_num_proposed_drafts", d.get("spec_proposed_drafts", d.get("spec_draft_token_num"))))
    if steps is None and acc is None:
        return None
    out: dict[str, Any] = {"source": "sglang spec_tokens_details"}
    if steps is not None:
        out["num_spec_steps"] = int(steps)
    if acc is not None:
        out["num_accepted_draft_tokens"] = int(acc)
    if draft is not None:
        out["num_draft_tokens"] = int(draft)
    if _num(d.get("spec_accept_length")) is not None:
        out["mean_acceptance_length"] = d["spec_accept_length"]
    if _num(d.get("spec_accept_rate")) is not None:
        out["draft_acceptance_rate"] = d["spec_accept_rate"]
    hist = d.get("spec_correct_drafts_histogram", d.get("spec_accept_histogram"))
    if isinstance(hist, list):
        out["acceptance_histogram"] = hist
    return out


def spec_decode_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The per-request spec-decode object of one decoded SSE event or body, in any dialect."""
    metrics = obj.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        spec: dict[str, Any] = metrics["speculative_decoding"]
        return spec
    if "timings" in obj:
        return llamacpp_spec_decode(obj["timings"])
    if "sglext" in obj:
        return sglang_spec_decode(obj["sglext"])
    return None


def one_token_per_event(n_events: int, completion_tokens: int | None) -> list[int] | None:
    """``[1] * n`` when ``n`` content events carried ``completion_tokens == n`` tokens, else ``None``."""
    if n_events <= 0 or completion_tokens is None or completion_tokens != n_events:
        return None
    return [1] * n_events

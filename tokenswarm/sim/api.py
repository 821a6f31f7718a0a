"""Request validation and response bodies of the OpenAI/vLLM-compatible surface (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tokenswarm.sim.tokenizer import chat_prompt, token_ids, tokenize

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    411: "BadRequestError",
    413: "BadRequestError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class HttpError(Exception):
    """An error answer: status + OpenAI-style error JSON."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> bytes:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """``{"error": {"message", "type", "param", "code"}}`` as vLLM's OpenAI server sends it."""
    return orjson.dumps(
        {"error": {"message": message, "type": ERROR_TYPES.get(status, "Error"), "param": param, "code": status}}
    )


@dataclass
class CompletionRequest:
    """A validated ``/v1/chat/completions`` or ``/v1/completions`` request."""

    endpoint: str  #: "chat" | "completions"
    model: str
    prompt_len: int
    source: list[str]  #: tokens the model may copy (message contents, or the prompt)
    max_tokens: int
    max_tokens_given: bool
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    thinking: bool = True  #: chat_template_kwargs.enable_thinking (reasoning mode only)
    prompt: list[str] | None = None  #: the prompt's tokens (as the chat template renders them)
    guided: dict[str, Any] | None = None  #: response_format's JSON Schema (guided decoding), None = free text


def parse_json_object(body: bytes) -> dict[str, Any]:
    """Decode a JSON object body or raise a 400."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise HttpError(400, f"Invalid JSON in request body: {e}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "Request body must be a JSON object")
    return data


def check_model(data: dict[str, Any], served_model: str, adapters: tuple[str, ...] = ()) -> str:
    """The requested model (optional field) must be the served one or one of its LoRA adapters (404 otherwise)."""
    model = data.get("model")
    if model is None:
        return served_model
    if not isinstance(model, str):
        raise HttpError(400, "'model' must be a string", "model")
    if model != served_model and model not in adapters:
        raise HttpError(404, f"The model `{model}` does not exist.", "model")
    return model


def _number(data: dict[str, Any], name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    v = data.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise HttpError(400, f"'{name}' must be a number, got {v!r}", name)
    if v < lo or v > hi or (lo_open and v == lo):
        raise HttpError(400, f"'{name}' must be in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}", name)
    return float(v)


def _optional_int(data: dict[str, Any], name: str, lo: int) -> int | None:
    v = data.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise HttpError(400, f"'{name}' must be an integer, got {v!r}", name)
    if v < lo:
        raise HttpError(400, f"'{name}' must be >= {lo}, got {v!r}", name)
    return v


def prompt_tokens_of(data: dict[str, Any], endpoint: str) -> tuple[list[str], list[str]]:
    """(prompt tokens, copyable source tokens) of a chat/completions/tokenize body."""
    if endpoint == "chat":
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HttpError(400, "'messages' is required and must be a non-empty list", "messages")
        try:
            prompt = chat_prompt(messages)
        except ValueError as e:
            raise HttpError(400, str(e), "messages") from None
        source: list[str] = []
        for m in messages:
            c: Any = m.get("content")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c)
            if isinstance(c, str) and c:
                source.extend(tokenize(c if c[:1].isspace() else " " + c))
        return tokenize(prompt), source
    given: Any = data.get("prompt")
    if isinstance(given, list) and len(given) == 1 and isinstance(given[0], str):
        given = given[0]
    if isinstance(given, list) and given and all(isinstance(x, int) and not isinstance(x, bool) for x in given):
        toks = [f" <{x}>" for x in given]  # token ids: opaque tokens
        return toks, toks
    if not isinstance(given, str):
        raise HttpError(400, "'prompt' is required and must be a string (or one string, or a list of token ids)", "prompt")
    toks = tokenize(given)
    return toks, toks


_JSON_OBJECT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def guided_schema(response_format: Any) -> dict[str, Any] | None:
    """The schema a request's ``response_format`` asks for (None: free text); 400 if malformed."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise HttpError(400, "'response_format' must be an object", "response_format")
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return _JSON_OBJECT
    if kind == "json_schema":
        js = response_format.get("json_schema")
        schema = js.get("schema") if isinstance(js, dict) else None
        if not isinstance(schema, dict):
            raise HttpError(400, "'response_format.json_schema.schema' must be an object", "response_format")
        return schema
    raise HttpError(400, f"'response_format.type' must be text, json_object or json_schema, got {kind!r}",
                    "response_format")


def parse_completion(data: dict[str, Any], endpoint: str, served_model: str, max_model_len: int,
                     adapters: tuple[str, ...] = ()) -> CompletionRequest:
    """Validate a completion request against the served model (or an adapter) and context window."""
    model = check_model(data, served_model, adapters)
    n = data.get("n", 1)
    if n != 1:
        raise HttpError(400, f"'n' must be 1 (the simulator returns one choice), got {n!r}", "n")
    prompt_toks, source = prompt_tokens_of(data, endpoint)
    plen = len(prompt_toks)
    if plen == 0:
        raise HttpError(400, "The prompt is empty", "prompt")
    max_tokens = _optional_int(data, "max_completion_tokens", 1) if endpoint == "chat" else None
    if max_tokens is None:
        max_tokens = _optional_int(data, "max_tokens", 1)
    given = max_tokens is not None
    if plen > max_model_len:
        raise HttpError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{plen} input tokens. Please reduce the length of the input messages.",
            "messages" if endpoint == "chat" else "prompt",
        )
    if max_tokens is not None and max_tokens > max_model_len:
        raise HttpError(  # vLLM 0.32's wording (docs/vllm-observations.md, Errors)
            400,
            f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "max_tokens",
        )
    # A prompt plus max_tokens beyond the window is not an error in vLLM: generation stops at
    # the context limit with finish_reason "length" (observed on a real vLLM, see the README).
    if max_tokens is None or plen + max_tokens > max_model_len:
        max_tokens = max_model_len - plen
        if max_tokens < 1:
            raise HttpError(400, f"The prompt ({plen} tokens) leaves no room to generate within {max_model_len}.")
    # OpenAI's default temperature is 1.0; clients that want greedy decoding send 0.
    temperature = _number(data, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(data, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise HttpError(400, f"'seed' must be an integer, got {seed!r}", "seed")
    stop = data.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise HttpError(400, "'stop' must be a string or a list of strings", "stop")
    ignore_eos = data.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise HttpError(400, "'ignore_eos' must be a boolean", "ignore_eos")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise HttpError(400, "'stream' must be a boolean", "stream")
    so = data.get("stream_options")
    include_usage = continuous = False
    if so is not None:
        if not isinstance(so, dict):
            raise HttpError(400, "'stream_options' must be an object", "stream_options")
        if not stream:
            raise HttpError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
        include_usage = bool(so.get("include_usage"))
        # vLLM: continuous usage stats are only sent together with include_usage.
        continuous = include_usage and bool(so.get("continuous_usage_stats"))
    ctk = data.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        raise HttpError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs")
    thinking = (ctk or {}).get("enable_thinking", True) is not False
    guided = guided_schema(data.get("response_format"))
    return CompletionRequest(
        endpoint=endpoint, model=model, prompt_len=plen, source=source, max_tokens=max_tokens,
        max_tokens_given=given, temperature=temperature, top_p=top_p, seed=seed, stop=stops,
        ignore_eos=ignore_eos, stream=stream, include_usage=include_usage, continuous_usage=continuous,
        thinking=thinking, prompt=prompt_toks, guided=guided,
    )


def models_body(model: str, adapters: tuple[str, ...], created: int, max_model_len: int) -> bytes:
    """``GET /v1/models``: the served model's card, and one per LoRA adapter (parent: the model)."""
    card = {"id": model, "object": "model", "created": created, "owned_by": "tokenswarm-sim",
            "root": model, "parent": None, "max_model_len": max_model_len}
    cards = [card] + [{**card, "id": name, "root": name, "parent": model} for name in adapters]
    return orjson.dumps({"object": "list", "data": cards})


def tokenize_body(body: bytes, model: str, adapters: tuple[str, ...], max_model_len: int) -> bytes:
    """``POST /tokenize`` (vLLM's): the prompt's token count and ids (and strings when asked)."""
    data = parse_json_object(body)
    check_model(data, model, adapters)
    if "messages" in data:
        toks, _ = prompt_tokens_of(data, "chat")
    elif "prompt" in data:
        toks, _ = prompt_tokens_of(data, "completions")
    else:
        raise HttpError(400, "'prompt' or 'messages' is required", "prompt")
    out: dict[str, Any] = {"count": len(toks), "max_model_len": max_model_len,
                           "tokens": token_ids(toks), "token_strs": toks if data.get("return_token_strs") else None}
    return orjson.dumps(out)

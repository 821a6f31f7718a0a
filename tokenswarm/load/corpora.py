"""Offline text corpora for prompts: Python's stdlib sources, its bundled docs, user datasets.

Nothing is downloaded. The built-in corpora come with every CPython install:

* **code** - the standard library's ``.py`` files, found via ``sysconfig.get_paths()["stdlib"]``
  (inside a venv this still points at the base interpreter's ``lib/pythonX.Y``). Test
  directories and ``site-packages`` are skipped.
* **prose** - ``pydoc_data.topics.topics``: the language reference sections that ``help()``
  shows (~450 KB of English technical prose, ~80 sections).

User data:

* **jsonl** - one JSON object per line with ``prompt`` (string) or ``messages`` (OpenAI chat
  list), and an optional positive integer ``max_tokens``. Other keys are ignored.
* **sharegpt** - a JSON array, or JSONL, of ``{"conversations": [{"from": "human"|"gpt", "value": ...}]}``.
  ``human``/``user`` map to the user role, ``gpt``/``assistant``/``chatgpt``/``bard``/``bing``/
  ``model`` to assistant, ``system`` to system. Conversations without a human turn are skipped
  (the public ShareGPT dumps contain many empty ones).

Errors in user data name the file and the line (:class:`DatasetError`).
"""

from __future__ import annotations

import bisect
import functools
import inspect
import json
import logging
import os
import random
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokenswarm.load.scenario import ScenarioError

log = logging.getLogger(__name__)

#: stdlib directories that are tests, demos or third-party packages rather than library code
_SKIP_DIRS = frozenset(
    {
        "test",
        "tests",
        "idle_test",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "turtledemo",
        "lib2to3",
        "ensurepip",
        "venv",
        "__phello__",
    }
)
_MIN_SOURCE_BYTES = 2_000
_MAX_SOURCE_BYTES = 400_000


class CorpusUnavailable(RuntimeError):
    """A built-in corpus cannot be found in this Python installation."""


class DatasetError(ScenarioError):
    """A user dataset is malformed. ``field`` is ``"line N"`` (or ``"file"`` for whole-file problems)."""


# --------------------------------------------------------------------------- code (stdlib)


def stdlib_dir() -> Path:
    """Directory of the standard library's sources (works in a venv)."""
    candidates = [sysconfig.get_paths().get("stdlib"), os.path.dirname(os.__file__)]
    for cand in candidates:
        if cand and os.path.isfile(os.path.join(cand, "json", "decoder.py")):
            return Path(cand)
    raise CorpusUnavailable(
        f"cannot find the Python standard library sources (looked in {candidates}); "
        "the 'code' task needs them - install the full Python (not a sources-stripped build)"
    )


@functools.lru_cache(maxsize=1)
def stdlib_sources() -> tuple[str, ...]:
    """Sorted relative paths of library ``.py`` files of a useful size (deterministic order)."""
    root = stdlib_dir()
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in filenames:
            if not name.endswith(".py") or name.startswith("test_"):
                continue
            full = os.path.join(dirpath, name)
            try:
                size = os.path.getsize(full)
            except OSError:
                continue
            if _MIN_SOURCE_BYTES <= size <= _MAX_SOURCE_BYTES:
                found.append(os.path.relpath(full, root).replace(os.sep, "/"))
    if not found:
        raise CorpusUnavailable(f"no library .py files found under {root}")
    return tuple(sorted(found))


@functools.lru_cache(maxsize=256)
def read_source(rel: str) -> str:
    """Text of one stdlib file (cached; decoding errors replaced, never raised)."""
    return (stdlib_dir() / rel).read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class FunctionInfo:
    """A documented function or method in a stdlib file."""

    name: str
    signature: str  # e.g. "def loads(s, *, cls=None, **kw):"
    docstring: str
    line: int  # 1-based line of the ``def``
    offset: int  # character offset of the ``def`` line in the file
    indent: str = ""  # leading whitespace of the ``def`` line (methods are indented)


# A def line (arguments may nest one level of parentheses), then a triple-quoted docstring.
# A regex rather than ast: parsing 64 modules with ast costs seconds at start-up on a small box.
_DOCUMENTED_DEF = re.compile(
    r"^(?P<indent>[ \t]*)(?:async[ \t]+)?def[ \t]+(?P<name>[A-Za-z]\w*)[ \t]*"
    r"\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)[^:\n]*:[ \t]*\n"
    r"[ \t]+[rRuU]?(?P<q>\"\"\"|\'\'\')(?P<doc>.*?)(?P=q)",
    re.MULTILINE | re.DOTALL,
)


@functools.lru_cache(maxsize=256)
def documented_functions(rel: str) -> tuple[FunctionInfo, ...]:
    """Public functions/methods of a file that have a docstring of at least 40 characters."""
    text = read_source(rel)
    starts = _line_starts(text)
    out = []
    for m in _DOCUMENTED_DEF.finditer(text):
        doc = inspect.cleandoc(m.group("doc"))
        if len(doc) < 40:
            continue
        offset = m.start("indent")
        line = bisect.bisect_right(starts, offset)
        header = text[offset : text.index("\n", m.end("args"))]
        signature = " ".join(header.split()).replace("( ", "(").replace(", )", ")")
        out.append(FunctionInfo(m.group("name"), signature, doc, line, offset, m.group("indent")))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def top_level_defs(rel: str) -> tuple[tuple[int, int], ...]:
    """``(line, offset)`` of each top-level ``def``/``class`` line of a stdlib file (1-based lines)."""
    text = read_source(rel)
    return tuple((i + 1, off) for i, off in _def_lines(text))


def _def_lines(text: str):
    for i, off in enumerate(_line_starts(text)):
        if text.startswith(("def ", "class ", "async def "), off):
            yield i, off


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


class CodeCorpus:
    """Excerpts of real library source, starting at a line boundary."""

    def __init__(self, files: tuple[str, ...] | None = None) -> None:
        self.files = stdlib_sources() if files is None else tuple(files)
        if not self.files:
            raise CorpusUnavailable("empty code corpus")

    def subset(self, rng: random.Random, n_files: int) -> "CodeCorpus":
        """A corpus of ``n_files`` files chosen by ``rng``, read and parsed now.

        Prompt sources use a preloaded subset so that no file is read or parsed while requests
        are in flight (``ast.parse`` of a big module would block the gevent hub for ms).
        """
        files = sorted(rng.sample(self.files, min(n_files, len(self.files))))
        for rel in files:
            read_source(rel)
            top_level_defs(rel)
            documented_functions(rel)
        return CodeCorpus(tuple(files))

    def excerpt(self, rng: random.Random, n_chars: int) -> tuple[str, str]:
        """``(label, code)`` of about ``n_chars`` characters from a random file.

        Starts at a top-level ``def``/``class`` line when the file has one, continues into the
        next files (with a ``# file:`` marker) when one file is too short, ends at a line end.
        """
        rel = self.files[rng.randrange(len(self.files))]
        text = read_source(rel)
        starts = top_level_defs(rel)
        line_no, offset = starts[rng.randrange(len(starts))] if starts else (1, 0)
        label = f"stdlib:{rel}:{line_no}"
        code = text[offset:]
        idx = self.files.index(rel)
        while len(code) < n_chars:
            idx = (idx + 1) % len(self.files)
            code += f"\n\n# file: {self.files[idx]}\n" + read_source(self.files[idx])
        return label, cut_at_line(code, n_chars)


# --------------------------------------------------------------------------- prose (pydoc topics)


@dataclass(frozen=True)
class Topic:
    key: str
    title: str
    start: int  # offset in ProseCorpus.text


class ProseCorpus:
    """Python's bundled reference documentation as one deterministic text stream."""

    def __init__(self) -> None:
        try:
            from pydoc_data.topics import topics
        except ImportError as exc:  # some distro Pythons split pydoc_data out
            raise CorpusUnavailable(
                "pydoc_data.topics is not available in this Python; "
                "the prose corpus (qa, summarization, multi_turn) needs it"
            ) from exc
        parts: list[str] = []
        self.topics: list[Topic] = []
        pos = 0
        for key in sorted(topics):
            body = topics[key].strip() + "\n\n"
            title = body.split("\n", 1)[0].strip() or key
            self.topics.append(Topic(key, title, pos))
            parts.append(body)
            pos += len(body)
        self.text = "".join(parts)
        if len(self.text) < 10_000:
            raise CorpusUnavailable("pydoc_data.topics is unexpectedly small")
        self._starts = [t.start for t in self.topics]
        # paragraph starts, for excerpts that begin at a natural boundary
        self._paras = [0] + [m.end() for m in re.finditer(r"\n\n(?=\S)", self.text)]

    def topic_at(self, offset: int) -> Topic:
        """The topic that contains ``offset``."""
        return self.topics[bisect.bisect_right(self._starts, offset) - 1]

    def excerpt(self, rng: random.Random, n_chars: int, topic: Topic | None = None) -> tuple[str, str]:
        """``(label, text)``: about ``n_chars`` from a paragraph start (in ``topic`` if given), wrapping."""
        if topic is None:
            start = self._paras[rng.randrange(len(self._paras))]
        else:
            lo = bisect.bisect_left(self._paras, topic.start)
            idx = self.topics.index(topic)
            end = self.topics[idx + 1].start if idx + 1 < len(self.topics) else len(self.text)
            hi = max(lo + 1, bisect.bisect_left(self._paras, end))
            start = self._paras[rng.randrange(lo, hi)]
        text = self.text[start : start + n_chars + 200]
        while len(text) < n_chars + 200:
            text += self.text[: n_chars + 200 - len(text)]
        return f"pydoc:topics/{self.topic_at(start).key}", cut_at_space(text, n_chars)


@functools.lru_cache(maxsize=1)
def prose_corpus() -> ProseCorpus:
    """The shared prose corpus (built once per process)."""
    return ProseCorpus()


@functools.lru_cache(maxsize=1)
def code_corpus() -> CodeCorpus:
    """The shared code corpus (built once per process)."""
    return CodeCorpus()


def cut_at_space(text: str, n_chars: int) -> str:
    """``text[:n_chars]`` moved back to the last whitespace (if one is within 40 chars)."""
    if len(text) <= n_chars:
        return text
    cut = text.rfind(" ", max(0, n_chars - 40), n_chars + 1)
    nl = text.rfind("\n", max(0, n_chars - 40), n_chars + 1)
    cut = max(cut, nl)
    return text[: cut if cut > 0 else n_chars].rstrip()


def cut_at_line(text: str, n_chars: int) -> str:
    """``text[:n_chars]`` moved back to a line end (if one is within 120 chars), else to a space."""
    if len(text) <= n_chars:
        return text
    nl = text.rfind("\n", max(0, n_chars - 120), n_chars + 1)
    if nl > 0:
        return text[:nl]
    return cut_at_space(text, n_chars)


# --------------------------------------------------------------------------- user datasets


@dataclass(frozen=True)
class DatasetItem:
    """One prompt or conversation from a user dataset."""

    prompt: str | None  # plain prompt (jsonl ``prompt``)
    messages: tuple[dict, ...] | None  # chat messages (jsonl ``messages`` / ShareGPT turns)
    user_turns: tuple[str, ...]  # user messages in order (multi-turn replay)
    max_tokens: int | None
    where: str  # "file.jsonl:12" for provenance

    def first_messages(self) -> tuple[dict, ...]:
        """Chat messages for a single-shot request: everything up to the first user message."""
        if self.messages is None:
            return ({"role": "user", "content": self.prompt or ""},)
        out = []
        for msg in self.messages:
            out.append(msg)
            if msg["role"] == "user":
                break
        return tuple(out)

    def as_text(self) -> str:
        """A plain prompt for the completions API."""
        if self.prompt is not None:
            return self.prompt
        return render_messages_as_text(self.first_messages())


def render_messages_as_text(messages) -> str:
    """Render chat messages for a completions endpoint: ``Role: content`` blocks, then ``Assistant:``."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


def _err(path: str, line: int | None, expected: str, got) -> DatasetError:
    return DatasetError(path, f"line {line}" if line else "file", expected, got)


def _jsonl_item(obj, path: str, line: int) -> DatasetItem:
    if not isinstance(obj, dict):
        raise _err(path, line, "a JSON object with 'prompt' or 'messages'", obj)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise _err(path, line, "'max_tokens' to be a positive integer", max_tokens)
    where = f"{os.path.basename(path)}:{line}"
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise _err(path, line, "'prompt' to be a string", obj["prompt"])
        return DatasetItem(obj["prompt"], None, (obj["prompt"],), max_tokens, where)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise _err(path, line, "'messages' to be a non-empty list", msgs)
        clean = []
        for i, m in enumerate(msgs):
            if (
                not isinstance(m, dict)
                or m.get("role") not in _CHAT_ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise _err(
                    path,
                    line,
                    f"messages[{i}] to be {{'role': one of {'|'.join(_CHAT_ROLES)}, 'content': string}}",
                    m,
                )
            clean.append({"role": m["role"], "content": m["content"]})
        users = tuple(m["content"] for m in clean if m["role"] == "user")
        if not users:
            raise _err(path, line, "'messages' to contain a user message", msgs)
        return DatasetItem(None, tuple(clean), users, max_tokens, where)
    raise _err(path, line, "a 'prompt' string or a 'messages' list", sorted(obj))


def _sharegpt_item(obj, path: str, line: int) -> DatasetItem | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        raise _err(
            path,
            line,
            "an object with a 'conversations' list",
            obj if not isinstance(obj, dict) else sorted(obj),
        )
    msgs = []
    for i, turn in enumerate(obj["conversations"]):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise _err(path, line, f"conversations[{i}] to be {{'from': ..., 'value': string}}", turn)
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise _err(
                path,
                line,
                f"conversations[{i}].from to be one of {', '.join(sorted(_SHAREGPT_ROLES))}",
                turn.get("from"),
            )
        msgs.append({"role": role, "content": turn["value"]})
    users = tuple(m["content"] for m in msgs if m["role"] == "user" and m["content"].strip())
    if not users:
        return None
    return DatasetItem(None, tuple(msgs), users, None, f"{os.path.basename(path)}:{line}")


def _iter_json_array(text: str, path: str):
    """Yield ``(line, obj)`` for each element of a top-level JSON array, with its line number."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)

    def skip_ws(j: int) -> int:
        while j < n and text[j] in " \t\r\n":
            j += 1
        return j

    i = skip_ws(i)
    if i < n and text[i] == "]":
        return
    while True:
        line = text.count("\n", 0, i) + 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise _err(path, exc.lineno, "valid JSON", exc.msg) from None
        yield line, obj
        i = skip_ws(i)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            return
        raise _err(path, text.count("\n", 0, i) + 1, "',' or ']' in the JSON array", text[i : i + 20])


def _iter_jsonl(text: str, path: str):
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _err(path, lineno, "one JSON object per line", f"{exc.msg} at column {exc.colno}") from None


def detect_format(path: str, text: str) -> str:
    """``sharegpt`` for a JSON array or JSONL whose first object has ``conversations``, else ``jsonl``."""
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    first = head.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    return "sharegpt" if isinstance(obj, dict) and "conversations" in obj else "jsonl"


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, fmt: str, mtime_ns: int, size: int) -> tuple[DatasetItem, ...]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _err(path, None, "UTF-8 text", str(exc)) from None
    if fmt == "auto":
        fmt = detect_format(path, text)
    items: list[DatasetItem] = []
    skipped = 0
    if fmt == "sharegpt":
        rows = _iter_json_array(text, path) if text.lstrip().startswith("[") else _iter_jsonl(text, path)
        for line, obj in rows:
            item = _sharegpt_item(obj, path, line)
            if item is None:
                skipped += 1
            else:
                items.append(item)
    elif fmt == "jsonl":
        for line, obj in _iter_jsonl(text, path):
            items.append(_jsonl_item(obj, path, line))
    else:
        raise _err(path, None, "format jsonl, sharegpt or auto", fmt)
    if skipped:
        log.info("%s: skipped %d conversations without a human turn", path, skipped)
    if not items:
        raise _err(path, None, f"at least one usable {fmt} record", "none")
    return tuple(items)


def load_dataset(path: str, fmt: str = "auto") -> tuple[DatasetItem, ...]:
    """Load and validate a user dataset (cached per path, format, mtime and size)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _err(path, None, "an existing readable dataset file", exc.strerror or str(exc)) from None
    return _load_cached(os.path.abspath(path), fmt, st.st_mtime_ns, st.st_size)

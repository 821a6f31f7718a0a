"""The built-in corpora: Python's standard-library sources (code) and bundled docs (prose).

Both come with every CPython install, so nothing is downloaded. :class:`CodeCorpus` cuts
excerpts of real library source (starting at a top-level ``def``/``class``) and lists
documented functions (:class:`FunctionInfo`); :class:`ProseCorpus` serves paragraphs of the
``pydoc_data.topics`` reference text. A missing corpus raises :class:`CorpusUnavailable`.
"""

from __future__ import annotations

import bisect
import functools
import inspect
import itertools
import os
import random
import re
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


# --------------------------------------------------------------------------- code (stdlib)


@functools.cache
def stdlib_dir() -> Path:
    """Directory of the standard library's sources (works in a venv); found once per process
    (``sysconfig.get_paths`` costs ~0.25 ms, and every file read asked it)."""
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
    top = str(root)
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        # os.walk joins each directory onto ``top``: its relative part is what follows, found once
        # per directory (os.path.relpath per file was ~5 ms of a code source's start-up)
        prefix = dirpath[len(top):].lstrip(os.sep).replace(os.sep, "/")
        prefix = prefix + "/" if prefix else ""
        for name in filenames:
            if not name.endswith(".py") or name.startswith("test_"):
                continue
            try:
                size = os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                continue
            if _MIN_SOURCE_BYTES <= size <= _MAX_SOURCE_BYTES:
                found.append(prefix + name)
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
# It is matched at the start of each line that holds "def" (_documented_defs), not searched with
# ^ under MULTILINE: that tried every line of the file, 3.6x the time (~17 ms of a code source's
# start-up for its 53 files).
_DOCUMENTED_DEF = re.compile(
    r"(?P<indent>[ \t]*)(?:async[ \t]+)?def[ \t]+(?P<name>[A-Za-z]\w*)[ \t]*"
    r"\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)[^:\n]*:[ \t]*\n"
    r"[ \t]+[rRuU]?(?P<q>\"\"\"|\'\'\')(?P<doc>.*?)(?P=q)",
    re.DOTALL,
)


def _documented_defs(text: str) -> Iterator[re.Match[str]]:
    """The matches of :data:`_DOCUMENTED_DEF` at line starts, in order and not overlapping (what
    ``finditer`` with ``^`` under MULTILINE finds), trying only the lines that hold ``def``."""
    pos = 0  # where the next match may start: after the previous one
    while (i := text.find("def", pos)) >= 0:
        line_start = text.rfind("\n", 0, i) + 1
        m = _DOCUMENTED_DEF.match(text, line_start) if line_start >= pos else None
        if m is None:
            pos = i + 3
            continue
        yield m
        pos = m.end()


@functools.lru_cache(maxsize=256)
def documented_functions(rel: str) -> tuple[FunctionInfo, ...]:
    """Public functions/methods of a file that have a docstring of at least 40 characters."""
    text = read_source(rel)
    out = []
    line, counted_to = 1, 0  # the matches come in order: count the line feeds once, as they pass
    for m in _documented_defs(text):
        doc = inspect.cleandoc(m.group("doc"))
        if len(doc) < 40:
            continue
        offset = m.start("indent")
        line += text.count("\n", counted_to, offset)
        counted_to = offset
        header = text[offset : text.index("\n", m.end("args"))]
        signature = " ".join(header.split()).replace("( ", "(").replace(", )", ")")
        out.append(FunctionInfo(m.group("name"), signature, doc, line, offset, m.group("indent")))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def top_level_defs(rel: str) -> tuple[tuple[int, int], ...]:
    """``(line, offset)`` of each top-level ``def``/``class`` line of a stdlib file (1-based lines)."""
    return tuple((i + 1, off) for i, off in _def_lines(read_source(rel)))


_TOP_LEVEL_KEYWORDS = ("def ", "class ", "async def ")
# The line feed before each such line: a literal first character lets the regex engine skip to
# the line feeds, where ^ under MULTILINE tried every position (5x the time).
_TOP_LEVEL_DEF_AFTER = re.compile(r"\n(?=" + "|".join(map(re.escape, _TOP_LEVEL_KEYWORDS)) + ")")


def _def_lines(text: str) -> Iterator[tuple[int, int]]:
    """``(0-based line, offset)`` of each line that starts with ``def``, ``class`` or ``async def``
    (a line ends at a line feed only)."""
    offsets: Iterator[int] = (m.end() for m in _TOP_LEVEL_DEF_AFTER.finditer(text))
    if text.startswith(_TOP_LEVEL_KEYWORDS):
        offsets = itertools.chain((0,), offsets)
    line, counted_to = 0, 0
    for offset in offsets:
        line += text.count("\n", counted_to, offset)
        counted_to = offset
        yield line, offset


class CodeCorpus:
    """Excerpts of real library source, starting at a line boundary."""

    def __init__(self, files: tuple[str, ...] | None = None) -> None:
        self.files = stdlib_sources() if files is None else tuple(files)
        if not self.files:
            raise CorpusUnavailable("empty code corpus")

    def subset(self, rng: random.Random, n_files: int, *, functions: bool = True) -> "CodeCorpus":
        """A corpus of ``n_files`` files chosen by ``rng``, read and parsed now.

        Prompt sources use a preloaded subset so that no file is read or parsed while requests
        are in flight (``ast.parse`` of a big module would block the gevent hub for ms).
        ``functions=False``: a source that only takes excerpts (extraction documents) skips
        finding the documented functions, which only code-generation prompts use (~0.4 ms a
        file: ~25 ms of a mixed scenario's start-up).
        """
        files = sorted(rng.sample(self.files, min(n_files, len(self.files))))
        for rel in files:
            read_source(rel)
            top_level_defs(rel)
            if functions:
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
            from pydoc_data.topics import topics  # a large module: only when this corpus is made
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
        #: the topics' titles in order (the contact records of the extraction task draw from them)
        self.titles: tuple[str, ...] = tuple(t.title for t in self.topics)
        # each topic's index (what topics.index gives): excerpt() looked it up by a linear scan of
        # dataclass comparisons, once per qa prompt
        self._topic_index = {t: i for i, t in reversed(list(enumerate(self.topics)))}
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
            idx = self._topic_index.get(topic)
            if idx is None:
                idx = self.topics.index(topic)  # not one of ours: ValueError, as before
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

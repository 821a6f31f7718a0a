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
* **spec_bench** - Spec-Bench's ``question.jsonl``: ``{"question_id", "category", "turns": [user
  turns]}`` per line. Each item keeps its task category (MT-Bench's eight categories are
  Spec-Bench's one ``mt_bench`` task, see ``SPEC_BENCH_TASKS``).

Errors in user data name the file and the line (:class:`DatasetError`).

Layout: ``builtin`` holds the code and prose corpora, ``datasets`` the user dataset loading.
Import from this package.
"""

from __future__ import annotations

from tokenswarm.workload.corpora.builtin import (
    CodeCorpus,
    CorpusUnavailable,
    FunctionInfo,
    ProseCorpus,
    Topic,
    code_corpus,
    cut_at_line,
    cut_at_space,
    documented_functions,
    prose_corpus,
    read_source,
    stdlib_dir,
    stdlib_sources,
    top_level_defs,
)
from tokenswarm.workload.corpora.datasets import (
    SPEC_BENCH_TASKS,
    DatasetError,
    DatasetItem,
    category_counts,
    detect_format,
    file_format,
    load_dataset,
    render_messages_as_text,
)

__all__ = [
    "SPEC_BENCH_TASKS",
    "CodeCorpus",
    "CorpusUnavailable",
    "DatasetError",
    "DatasetItem",
    "FunctionInfo",
    "ProseCorpus",
    "Topic",
    "category_counts",
    "code_corpus",
    "cut_at_line",
    "cut_at_space",
    "detect_format",
    "documented_functions",
    "file_format",
    "load_dataset",
    "prose_corpus",
    "read_source",
    "render_messages_as_text",
    "stdlib_dir",
    "stdlib_sources",
    "top_level_defs",
]

"""Prompts for each task kind, sized in tokens, reproducible from a seed.

One :class:`PromptSource` per task and worker process, built at test start:

1. **Calibrate.** Build ``pool_size`` sample prompts from a private RNG seeded with
   ``(seed, task name)``, count each with the :class:`~tokenswarm.workload.tokencount.TokenCounter`
   (server ``/tokenize``, local tokenizer or estimate) and fit characters-per-token for this
   task's corpus and template. That is at most ``pool_size`` counter calls, once.
2. **Generate.** ``next_prompt(rng)`` / ``conversation(rng)`` then build a fresh prompt per
   request from the caller's RNG: draw the target length from the task's distribution and cut a
   corpus excerpt of ``target x chars_per_token`` characters. No counter calls, no I/O beyond
   the (cached) stdlib files, so the hot path is string slicing. Fresh prompts per request keep
   the server's prefix cache honest (a small repeated pool would make it look better than it is).

Determinism: the same task, seed, counter and RNG state give the same prompts. Callers seed
``random.Random`` per worker/user (e.g. ``Random(f"{seed}:{worker}:{user}")``).

Token targets are approximate by construction (``Calibration.median_abs_error_pct`` says how
approximate for this corpus); requests record the server's own ``usage`` counts. The target
counts prompt text only: a chat template adds a few tokens on the server side.

The values handed out (``Prompt``, ``Conversation``, ``Calibration``) and the chat history of a
conversation's turn are in :mod:`~tokenswarm.workload.prompttypes`; trace replay's prompts in
:mod:`~tokenswarm.workload.replay`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from tokenswarm.workload.corpora import (
    DatasetItem,
    code_corpus,
    cut_at_space,
    documented_functions,
    load_dataset,
    prose_corpus,
    read_source,
)
from tokenswarm.workload.corpora.extraction import SCHEMAS, ExtractionSchema, contact_record
from tokenswarm.workload.prompttypes import Calibration, Conversation, Prompt
from tokenswarm.workload.scenario import TaskConfig
from tokenswarm.workload.tokencount import EstimateCounter, TokenCounter

#: each shipped schema as the prompt shows it (compact JSON), written once, not per prompt
_SCHEMA_TEXT: dict[str, str] = {s.name: json.dumps(s.schema, separators=(",", ":")) for s in SCHEMAS}

#: max_tokens for the ``huge_max_tokens`` abnormal case: beyond any model's context window
HUGE_MAX_TOKENS = 10_000_000

_QA_TEMPLATES = (
    "Can you explain {t} in Python?",
    "How does Python handle {t}?",
    "What are the rules for {t}, and when would I use it?",
    "Give me a short overview of {t} with an example.",
    "What is the most common mistake people make with {t}?",
    "Summarize what the documentation says about {t}.",
)
_FOLLOWUPS = (
    "Can you give a concrete example?",
    "How does that differ from {t}?",
    "What are common mistakes with this?",
    "Summarize that in three bullet points.",
    "Why does Python work this way?",
    "Can you show the same idea in code?",
    "Is that different in older Python versions?",
    "Thanks. And how does it interact with {t}?",
)
_UNICODE = (
    "Ünïcödé tëst: 你好，世界！ Привет, мир. مرحبا بالعالم 🙂🚀👩🏽‍💻 "
    "e\u0301 \u200bzero-width\u200b ｆｕｌｌｗｉｄｔｈ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 — what does this say?"
)
#: characters per token of each corpus before a counted sample corrects it
INIT_CHARS_PER_TOKEN = {"prose": 4.0, "code": 3.5, "dataset": 4.0}
_PREFIX_HEAD = "You are a helpful assistant. Use this reference material when it helps:\n\n"


def _topic_phrase(title: str) -> str:
    """'The "for" statement' -> 'the "for" statement' (a phrase that fits in a question)."""
    return title[0].lower() + title[1:] if title[:4] == "The " else title


class PromptSource:
    """Prompts of one task. Build once per worker process at test start (it calibrates)."""

    def __init__(
        self,
        task: TaskConfig,
        counter: TokenCounter | None,
        seed: int,
        pool_size: int = 64,
        api: str = "chat",
        code_files: int = 64,
        prefix_seed: int | None = None,
    ):
        if api not in ("chat", "completions"):
            raise ValueError(f"api must be 'chat' or 'completions', got {api!r}")
        self.task = task
        self.counter = counter or EstimateCounter()
        self.seed = seed
        self.api = api
        self.pool_size = max(1, pool_size)
        self.items: tuple[DatasetItem, ...] | None = None
        if task.dataset is not None:
            self.items = load_dataset(task.dataset.path, task.dataset.format, task.dataset.category)
            self.corpus = "dataset"
        elif task.kind in ("code", "extraction"):
            self.code = code_corpus().subset(random.Random(f"{seed}:{task.name}:files"), code_files,
                                             functions=task.kind == "code")  # extraction takes excerpts only
            self.corpus = "code" if task.kind == "code" else "prose"
        else:
            prose_corpus()
            self.corpus = "prose"
        if isinstance(self.counter, EstimateCounter):
            self.chars_per_token = self.counter.chars_per_token
        else:
            self.chars_per_token = INIT_CHARS_PER_TOKEN[self.corpus]
        self.followup_chars_per_token = self.chars_per_token
        self.calibration = self._calibrate()
        # Shared prefixes depend on the scenario seed only (not the worker): every worker sends
        # the same ones, so a server's prefix cache sees them as one population.
        self.prefixes, self._prefix_cum = self._build_prefixes(seed if prefix_seed is None else prefix_seed)

    # ------------------------------------------------------------------ public API

    def next_prompt(self, rng: random.Random) -> Prompt:
        """A fresh single-shot prompt (qa, summarization, code, extraction, abnormal; multi_turn gives turn 0).

        With a ``shared_prefix`` the drawn prefix comes first (a system message in chat).
        """
        prompt = self._next_prompt(rng)
        if not self.prefixes:
            return prompt
        prefix = self.prefixes[self.draw_prefix(rng)]
        if prompt.messages is not None:
            return _replace_payload(prompt, ({"role": "system", "content": prefix}, *prompt.messages), None)
        return _replace_payload(prompt, None, prefix + "\n\n" + (prompt.text or ""))

    def draw_prefix(self, rng: random.Random) -> int:
        """Index of the shared prefix for one request (uniform or Zipf, see ``SharedPrefix``)."""
        i = bisect.bisect_right(self._prefix_cum, rng.random() * self._prefix_cum[-1])
        return min(i, len(self._prefix_cum) - 1)

    def _next_prompt(self, rng: random.Random) -> Prompt:
        kind = self.task.kind
        if kind == "abnormal":
            return self._abnormal(rng)
        max_tokens = self.task.max_tokens.sample_int(rng)
        if self.items is not None:
            return self._dataset_prompt(rng, max_tokens)
        target = self.task.prompt_tokens.sample_int(rng)
        if kind == "extraction":
            return self._extraction(rng, target, max_tokens)
        if kind == "summarization":
            text, source = self._summarization(rng, target, max_tokens)
        elif kind == "code":
            text, source = self._code(rng, target)
        else:
            text, source = self._qa(rng, target)
        return self._wrap(text, target, max_tokens, source)

    def conversation(self, rng: random.Random) -> Conversation:
        """A multi-turn plan: number of turns, the user message and max_tokens of each turn."""
        task = self.task
        turns_dist = task.turns
        n = turns_dist.sample_int(rng) if turns_dist is not None else 1
        system = None
        if self.items is not None:
            item = self.items[rng.randrange(len(self.items))]
            # no turns distribution (Spec-Bench): every turn of the question, as the benchmark sends it
            n = len(item.user_turns) if turns_dist is None else max(1, min(n, len(item.user_turns)))
            messages = list(item.user_turns[:n])
            targets = [self._estimate(m) for m in messages]
            system = next((m["content"] for m in item.messages or () if m["role"] == "system"), None)
            source = f"dataset:{item.where}"
        else:
            corpus = prose_corpus()
            topic = corpus.topics[rng.randrange(len(corpus.topics))]
            first_target = task.prompt_tokens.sample_int(rng)
            first, source = self._qa(rng, first_target, topic=topic)
            messages, targets = [first], [first_target]
            follow = task.followup_tokens or task.prompt_tokens
            for _ in range(1, n):
                target = follow.sample_int(rng)
                messages.append(self._followup(rng, target))
                targets.append(target)
        if self.prefixes:
            prefix = self.prefixes[self.draw_prefix(rng)]
            system = prefix if system is None else f"{prefix}\n\n{system}"
        max_tokens = tuple(task.max_tokens.sample_int(rng) for _ in range(n))
        think = (0.0,) + tuple(task.think_time_s.sample(rng) for _ in range(1, n))
        return Conversation(n, tuple(messages), max_tokens, think, tuple(targets), source, system)

    # ------------------------------------------------------------------ calibration

    def _calibrate(self) -> Calibration:
        """Fit chars/token on ``pool_size`` sample prompts built from a private, seeded RNG.

        Each sample is counted once (``pool_size`` counter calls in all) and the ratio is refitted
        after every count, so later samples are already built with a good ratio. Multi-turn
        follow-up messages (short questions, denser in tokens) get their own ratio from half
        of the samples.
        """
        rng = random.Random(f"{self.seed}:{self.task.name}:calibration")
        n = self.pool_size if self.items is None else min(self.pool_size, len(self.items))
        followup_n = n // 2 if (self.task.kind == "multi_turn" and self.items is None) else 0
        texts, counts = self._fit(rng, n - followup_n, self._sample_text, "chars_per_token")
        if followup_n:
            self.followup_chars_per_token = self.chars_per_token
            f_texts, f_counts = self._fit(rng, followup_n, self._sample_followup, "followup_chars_per_token")
            ratio = {id(t): self.followup_chars_per_token for t in f_texts}
            texts, counts = texts + f_texts, counts + f_counts
        else:
            ratio = {}
        errors = [
            abs(len(t) / ratio.get(id(t), self.chars_per_token) - c) / c * 100
            for t, c in zip(texts, counts)
            if c > 0
        ]
        return Calibration(
            self.counter.name, self.chars_per_token, len(texts), statistics.median(errors) if errors else None
        )

    def _fit(self, rng: random.Random, n: int, build: Callable[[random.Random], str], attr: str) -> tuple[list[str], list[int]]:
        texts: list[str] = []
        counts: list[int] = []
        for _ in range(n):
            text = build(rng)
            if not text:
                continue
            texts.append(text)
            counts.append(self.counter.count(text))
            # median of per-sample ratios: robust to a few odd excerpts, and it centres the
            # per-prompt length error (a pooled ratio is dominated by the longest samples)
            ratios = [len(t) / c for t, c in zip(texts, counts) if c > 0]
            if ratios:
                setattr(self, attr, statistics.median(ratios))
        return texts, counts

    def _sample_followup(self, rng: random.Random) -> str:
        dist = self.task.followup_tokens or self.task.prompt_tokens
        return self._followup(rng, max(1, dist.sample_int(rng)))

    def _sample_text(self, rng: random.Random) -> str:
        """One calibration sample shaped like this task's real prompts."""
        if self.items is not None:
            item = self.items[rng.randrange(len(self.items))]
            return item.as_text() if item.prompt is not None else "\n".join(item.user_turns)
        target = max(1, self.task.prompt_tokens.sample_int(rng))
        if self.task.kind == "code":
            return self._code(rng, target)[0]
        if self.task.kind == "summarization":
            return self._summarization(rng, target, 128)[0]
        if self.task.kind == "extraction":
            p = self._extraction(rng, target, 128)
            return (p.text or "") if p.messages is None else str(p.messages[0]["content"])
        return self._qa(rng, target)[0]

    def _chars(self, tokens: int, chars_per_token: float | None = None) -> int:
        return max(0, int(round(tokens * (chars_per_token or self.chars_per_token))))

    def _estimate(self, text: str) -> int:
        return max(1, int(round(len(text) / self.chars_per_token))) if text else 0

    # ------------------------------------------------------------------ builders

    def _wrap(self, text: str, target: int, max_tokens: int, source: str, **extra: Any) -> Prompt:
        if self.api == "chat":
            return Prompt(({"role": "user", "content": text},), None, target, max_tokens, source, **extra)
        return Prompt(None, text, target, max_tokens, source, **extra)

    def _qa(self, rng: random.Random, target: int, topic: Any = None) -> tuple[str, str]:
        corpus = prose_corpus()
        if topic is None:
            topic = corpus.topics[rng.randrange(len(corpus.topics))]
        question = _QA_TEMPLATES[rng.randrange(len(_QA_TEMPLATES))].format(t=_topic_phrase(topic.title))
        budget = self._chars(target)
        tail = "\nAnswer:" if self.api == "completions" else ""
        head = "Answer the question using this documentation excerpt:\n\n" if budget > 600 else "Context: "
        question_part = f"\n\nQuestion: {question}{tail}"
        room = budget - len(head) - len(question_part)
        if room < 24:  # too short for context: the bare question, cut to size if it is long
            short = question + tail
            return (
                short if len(short) <= budget else cut_at_space(question, max(budget, 8))
            ), f"pydoc:topics/{topic.key}"
        _, excerpt = corpus.excerpt(rng, room, topic=topic)
        return head + excerpt + question_part, f"pydoc:topics/{topic.key}"

    def _followup(self, rng: random.Random, target: int) -> str:
        corpus = prose_corpus()
        other = corpus.topics[rng.randrange(len(corpus.topics))]
        text = _FOLLOWUPS[rng.randrange(len(_FOLLOWUPS))].format(t=_topic_phrase(other.title))
        budget = self._chars(target, self.followup_chars_per_token)
        head = "Also consider this part of the documentation:\n\n" if budget > 600 else "About this: "
        room = budget - len(text) - len(head) - 2
        if room < 24:  # short follow-up questions on their own, as many as fit
            for _ in range(3):
                more = _FOLLOWUPS[rng.randrange(len(_FOLLOWUPS))].format(t=_topic_phrase(other.title))
                if len(text) + 1 + len(more) > budget + len(more) // 2 or more in text:
                    break
                text = f"{text} {more}"
            return text if len(text) <= budget else cut_at_space(text, max(budget, 8))
        _, excerpt = corpus.excerpt(rng, room, topic=other)
        return f"{head}{excerpt}\n\n{text}"

    def _summarization(self, rng: random.Random, target: int, max_tokens: int) -> tuple[str, str]:
        words = max(10, int(max_tokens * 0.75) // 10 * 10)
        if self.api == "chat":
            head, tail = f"Summarize the following document in about {words} words.\n\n", ""
        else:
            head, tail = "Document:\n", f"\n\nSummarize the document above in about {words} words.\nSummary:"
        source, doc = prose_corpus().excerpt(rng, max(1, self._chars(target) - len(head) - len(tail)))
        return head + doc + tail, source

    def _code(self, rng: random.Random, target: int) -> tuple[str, str]:
        budget = self._chars(target)
        if rng.random() < self.task.completion_share:
            return self._code_completion(rng, budget)
        return self._code_generation(rng, budget)

    def _code_completion(self, rng: random.Random, budget: int) -> tuple[str, str]:
        if self.api == "completions":
            source, code = self.code.excerpt(rng, budget)
            return code + "\n", source
        head = "Continue the following Python code. Reply with code only.\n\n```python\n"
        tail = "\n```"
        source, code = self.code.excerpt(rng, max(1, budget - len(head) - len(tail)))
        return head + code + tail, source

    def _code_generation(self, rng: random.Random, budget: int) -> tuple[str, str]:
        corpus = self.code
        for _ in range(20):  # most library files have documented public functions
            rel = corpus.files[rng.randrange(len(corpus.files))]
            funcs = documented_functions(rel)
            if funcs:
                break
        else:
            return self._code_completion(rng, budget)
        fn = funcs[rng.randrange(len(funcs))]
        doc = fn.docstring if len(fn.docstring) <= 600 else cut_at_space(fn.docstring, 600)
        if self.api == "chat":
            head = "Here is part of a Python module, for context:\n\n```python\n"
            ask = (
                f"\n```\n\nWrite the function below for this module. Reply with code only.\n\n"
                f"    {fn.signature}\n\nIt should do this:\n{doc}"
            )
        else:
            head = ""
            indent = fn.indent
            body_doc = doc.replace("\n", "\n" + indent + "    ")
            ask = f'\n\n{indent}{fn.signature}\n{indent}    """{body_doc}\n{indent}    """\n'
        room = budget - len(head) - len(ask)
        text = read_source(rel)
        before = text[: fn.offset]
        if room <= 0:
            context = ""
        elif len(before) >= room:
            context = before[len(before) - room :]
            nl = context.find("\n")
            context = context[nl + 1 :] if 0 <= nl < 120 else context
        else:  # file head too short: put another module's code first
            _, extra = corpus.excerpt(rng, room - len(before))
            context = extra + "\n\n# file: " + rel + "\n" + before
        return head + context.rstrip("\n") + ask, f"stdlib:{rel}:{fn.line}"

    def _extraction(self, rng: random.Random, target: int, max_tokens: int) -> Prompt:
        """A document or record plus the instruction to return its fields as JSON (``SCHEMAS``)."""
        spec: ExtractionSchema = SCHEMAS[rng.randrange(len(SCHEMAS))]
        head = (f"{spec.instruction}\nReply with one JSON object only, matching this JSON Schema:\n"
                f"{_SCHEMA_TEXT[spec.name]}\n\n")
        tail = "\n\nJSON:" if self.api == "completions" else ""
        room = max(24, self._chars(target) - len(head) - len(tail) - 10)
        if spec.corpus == "code":
            source, doc = self.code.excerpt(rng, room)
        elif spec.corpus == "record":
            doc, source = contact_record(rng, prose_corpus().titles, room), "record:contact"
        else:
            source, doc = prose_corpus().excerpt(rng, room)
        text = f"{head}Document:\n{doc}{tail}"
        params: dict[str, Any] = {}
        if self.task.response_format == "json_schema":
            params["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": spec.name, "schema": spec.schema, "strict": True}}
        elif self.task.response_format == "json_object":
            params["response_format"] = {"type": "json_object"}
        return self._wrap(text, target, max_tokens, f"extraction:{spec.name}:{source}", params=params,
                          schema=spec.schema)

    def _build_prefixes(self, seed: int) -> tuple[tuple[str, ...], list[float]]:
        """The task's shared prefixes (sized with one counter call) and their cumulative weights."""
        sp = self.task.shared_prefix
        if sp is None:
            return (), []
        corpus = prose_corpus()

        def build(i: int, cpt: float) -> str:
            rng = random.Random(f"{seed}:{self.task.name}:prefix:{i}")
            _, text = corpus.excerpt(rng, max(8, int(sp.tokens * cpt) - len(_PREFIX_HEAD)))
            return f"{_PREFIX_HEAD}[{i}] {text}"

        cpt = INIT_CHARS_PER_TOKEN["prose"]
        first = build(0, cpt)
        counted = self.counter.count(first)
        if counted > 0:  # one correction from a counted sample, the same on every worker
            cpt = cpt * sp.tokens / counted
        prefixes = tuple(build(i, cpt) for i in range(sp.count))
        if sp.popularity == "zipf":
            weights = [1.0 / (i + 1) ** sp.zipf_s for i in range(sp.count)]
        else:
            weights = [1.0] * sp.count
        return prefixes, list(itertools.accumulate(weights))

    def _dataset_prompt(self, rng: random.Random, max_tokens: int) -> Prompt:
        assert self.items is not None  # dataset tasks load their items at construction
        item = self.items[rng.randrange(len(self.items))]
        if item.max_tokens is not None:
            max_tokens = item.max_tokens
        if self.api == "chat":
            messages = item.first_messages()
            target = self._estimate("\n".join(m["content"] for m in messages))
            return Prompt(messages, None, target, max_tokens, f"dataset:{item.where}")
        text = item.as_text()
        return Prompt(None, text, self._estimate(text), max_tokens, f"dataset:{item.where}")

    def _abnormal(self, rng: random.Random) -> Prompt:
        cases = self.task.abnormal_cases
        total = sum(w for _, w in cases)
        x = rng.random() * total
        case = cases[-1][0]
        for name, w in cases:
            x -= w
            if x < 0:
                case = name
                break
        max_tokens = self.task.max_tokens.sample_int(rng)
        source = f"abnormal:{case}"
        if case == "empty_prompt":
            return self._wrap("", 0, max_tokens, source, abnormal=case)
        if case == "unicode":
            return self._wrap(_UNICODE, self._estimate(_UNICODE), max_tokens, source, abnormal=case)
        target = self.task.prompt_tokens.sample_int(rng)
        text, _ = self._qa(rng, max(target, 1))
        if case == "huge_max_tokens":
            return self._wrap(text, target, HUGE_MAX_TOKENS, source, abnormal=case)
        if case == "invalid_params":
            return self._wrap(
                text, target, max_tokens, source, abnormal=case, params={"temperature": -1.0, "top_p": 7.0}
            )
        return self._wrap(text, target, max_tokens, source, abnormal=case)  # cancel_early


def _replace_payload(prompt: Prompt, messages: tuple[dict[str, Any], ...] | None, text: str | None) -> Prompt:
    return Prompt(messages, text, prompt.target_prompt_tokens, prompt.max_tokens, prompt.source, prompt.abnormal,
                  prompt.params, prompt.schema)


def build_prompt_sources(
    tasks: Iterable[TaskConfig], counter: TokenCounter | None, seed: int, api: str = "chat", pool_size: int = 64
) -> dict[str, PromptSource]:
    """One :class:`PromptSource` per task name (tasks with weight 0 included, they are cheap)."""
    return {t.name: PromptSource(t, counter, seed, pool_size=pool_size, api=api) for t in tasks}

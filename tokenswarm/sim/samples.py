"""Deterministic sample prompts by traffic type, for the simulator's tests and benchmarks.

Code and summarization prompts are long and full of re-usable spans (easy to draft);
open QA prompts are short questions (hard to draft). Generated, not downloaded.
"""

from __future__ import annotations

import random
from typing import Any

_TOPICS = ["cache", "queue", "scheduler", "parser", "client", "server", "metrics", "buffer", "router", "index"]
_QUESTIONS = [
    "Why is the sky blue?", "What causes inflation in an economy?", "Who was Ada Lovelace?",
    "How do vaccines train the immune system?", "What is the difference between weather and climate?",
    "Why do cats purr?", "How does a transistor work?", "What makes a good leader?",
    "Why did the Roman Empire fall?", "How do birds navigate during migration?",
    "What is a black hole?", "Why is sleep important for memory?",
]


def code_prompt(i: int = 0) -> str:
    """A refactoring request with ~300-500 tokens of Python code."""
    rng = random.Random(1000 + i)
    name = _TOPICS[i % len(_TOPICS)]
    funcs = []
    for j in range(6):
        arg = rng.choice(["items", "values", "records", "rows"])
        funcs.append(
            f"def {name}_step_{j}(self, {arg}, limit=None):\n"
            f"    \"\"\"Process {arg} for the {name}.\"\"\"\n"
            f"    result = []\n"
            f"    for item in {arg}:\n"
            f"        if limit is not None and len(result) >= limit:\n"
            f"            break\n"
            f"        result.append(self.transform_{j}(item))\n"
            f"    return result\n"
        )
    code = f"class {name.title()}Manager:\n" + "\n".join("    " + f.replace("\n", "\n    ") for f in funcs)
    return f"Refactor the following Python class to remove the duplicated loops. Return the full code.\n\n{code}"


def summarization_prompt(i: int = 0) -> str:
    """A ~700-token article followed by a request to summarise it."""
    rng = random.Random(2000 + i)
    topic = _TOPICS[i % len(_TOPICS)]
    sentences = []
    for _ in range(40):
        sentences.append(
            f"The {topic} team reported that the {rng.choice(['latency', 'throughput', 'error rate', 'cost'])} "
            f"of the {rng.choice(['north', 'south', 'east', 'west'])} region changed by {rng.randint(2, 40)} percent "
            f"after release {rng.randint(1, 9)}.{rng.randint(0, 9)}."
        )
    return "Summarize the following report in five sentences.\n\n" + " ".join(sentences)


def qa_prompt(i: int = 0) -> str:
    """A short open-ended question."""
    return _QUESTIONS[i % len(_QUESTIONS)] + " Explain in your own words."


PROMPTS = {"code": code_prompt, "summarization": summarization_prompt, "qa": qa_prompt}


def chat_messages(kind: str, i: int = 0) -> list[dict[str, Any]]:
    """One user message of the given traffic type."""
    return [{"role": "user", "content": PROMPTS[kind](i)}]

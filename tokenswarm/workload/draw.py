"""Which task the next request belongs to: a weighted draw, or a stratified deal.

``traffic.task_draw: per_request`` draws every request's task at random by weight: over many
requests the mix holds, but a rare task at low concurrency fills slowly and unevenly (at
concurrency 1 for 20 s, a task of weight 1 in 6 may get 1 request or 7). ``stratified`` deals
the tasks instead, by smooth weighted round robin: after ``k`` requests of one sender, every
task has had its share ``k * w / sum(w)``, give or take one. The order is fixed by the weights
and the sender's ``offset`` (its ordinal), so two runs of one scenario deal the same sequence
per sender, and senders started together do not all begin with the same task.
"""

from __future__ import annotations

from typing import Sequence


class StratifiedDraw:
    """Smooth weighted round robin over task indices (pure; no randomness)."""

    def __init__(self, weights: Sequence[float], offset: int = 0) -> None:
        self.weights = [max(float(w), 0.0) for w in weights]
        self.total = sum(self.weights)
        if not self.weights or self.total <= 0:
            raise ValueError("a stratified draw needs at least one positive weight")
        self.credit = [0.0] * len(self.weights)
        for _ in range(offset % 1024):  # a sender's phase: skip into the (periodic) sequence
            self.next_index()

    def next_index(self) -> int:
        """The index of the next task: the one furthest behind its share."""
        for i, w in enumerate(self.weights):
            self.credit[i] += w
        best = max(range(len(self.credit)), key=lambda i: self.credit[i])
        self.credit[best] -= self.total
        return best

"""The interleaved order of a study's arm-rounds."""

from __future__ import annotations


def interleaved_order(arms: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, arm) in run order: the arm order reverses every round (A B | B A | A B ...).

    Alternating the order means a slow drift of the machine (warming up, a neighbour
    arriving) lands on every arm alike instead of always on the arm that runs second.
    Rounds are numbered from 1.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    order: list[tuple[int, str]] = []
    for r in range(1, rounds + 1):
        names = arms if r % 2 == 1 else list(reversed(arms))
        order += [(r, a) for a in names]
    return order

"""The request bodies a tokenswarm run of a scenario sends, built ahead of time for the baseline.

``benchmarks/baseline_locustfile.py`` with ``BENCH_BODIES_FILE`` set cycles through the lines
of a JSONL file this module writes: one pre-serialised request body per line, built by
tokenswarm's own workload code from the scenario -- the per-process set-up
(:func:`tokenswarm.load.setup.build_worker_context`: prompt sources on the same seed and token
counter, the target's model and stream options), the same user classes' draws
(:func:`tokenswarm.load.users.pick_task`, :func:`~tokenswarm.load.users.task_deal`, per-user
seeded generators) and :meth:`tokenswarm.load.users.Conversationalist.send` up to the body it
hands the wire (prompts, ``max_tokens``, messages, ``response_format``, sampling, extra body
fields). A multi-turn conversation contributes its first turn's body once per turn (the
history the baseline cannot have: it has no replies to send back).

Each line is ``THINK_S<TAB>BODY``: the seconds the user waits after that request, as the
scenario has it (a conversation's think time between its turns, then the task's think time
after it), so the baseline carries the same request rate and idle streams as tokenswarm.

Users are dealt to the closed-loop classes by weight (as Locust spawns them) and take turns,
one request each per round, so the file's order is a run's mix at any prefix.

    python benchmarks/bench_bodies.py scenarios/mix.yaml --host http://127.0.0.1:8000 --out /tmp/mix.jsonl
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class _Built(Exception):
    """Raised from the body hook: the body is what was wanted; nothing is sent."""


class _NullSink:
    def add(self, record: Any) -> None:  # pragma: no cover - nothing is emitted
        pass


def _user_counts(classes: list[tuple[Any, int]], users: int) -> list[tuple[Any, int]]:
    """``users`` users dealt to the (class, weight) pairs (largest remainder), as Locust spawns them."""
    total = sum(w for _, w in classes)
    shares = [(c, users * w / total) for c, w in classes]
    counts = [int(s) for _, s in shares]
    order = sorted(range(len(shares)), key=lambda i: shares[i][1] - counts[i], reverse=True)
    for i in order[: users - sum(counts)]:
        counts[i] += 1
    return [(c, n) for (c, _), n in zip(shares, counts) if n]


def build_bodies(scenario: str | Path, base_url: str, users: int, per_user: int,
                 sets: list[str] | None = None) -> list[bytes]:
    """``users x per_user`` request bodies of a closed-loop run of ``scenario`` against
    ``base_url`` (its model and ``/tokenize`` are asked as tokenswarm asks them)."""
    from tokenswarm.load.setup import build_worker_context, discover_model, set_class_weights
    from tokenswarm.load.users import CLOSED_LOOP_USERS, Conversationalist, OpenLoopUser, pick_task, task_deal
    from tokenswarm.workload.scenario import load_scenario, parse_override

    overrides = dict(parse_override(s) for s in sets or [])
    sc = load_scenario(Path(scenario), overrides or None)
    model, answer, _ = discover_model(base_url, sc.target)
    if model is None:
        raise SystemExit(f"bench_bodies: no model at {base_url}: {answer}")
    fire = SimpleNamespace(fire=lambda **kw: None, _handlers=[])
    env = SimpleNamespace(events=SimpleNamespace(request=fire, llm_first_token=fire, llm_chunk=fire, llm_request=fire))
    ctx = build_worker_context(env, sc, "bench-bodies", base_url, model, _NullSink(), "local", 0)
    ctx.events = None
    ctx.request_event = None
    built: list[bytes] = []
    make_body = ctx.body

    def body_hook(*args: Any, **kw: Any) -> bytes:
        built.append(make_body(*args, **kw))
        raise _Built

    ctx.body = body_hook  # type: ignore[method-assign]
    # the user classes' weights are Locust's class attributes: set for this scenario, then put back
    # (a caller in the same process -- a test run -- keeps its own)
    saved = {cls: cls.weight for cls in (*CLOSED_LOOP_USERS, OpenLoopUser)}
    try:
        set_class_weights(sc, "closed")
        weighted = [(c, c.weight) for c in CLOSED_LOOP_USERS if c.weight > 0]
    finally:
        for cls, weight in saved.items():
            cls.weight = weight
    senders: list[tuple[Any, Any, Any, Any]] = []  # (runner, rng, task or None, deal or None)
    for cls, n in _user_counts(weighted, users):
        for _ in range(n):
            ordinal = ctx.next_user_ordinal(cls.__name__)
            runner = Conversationalist(ctx, None, None, cls.__name__)  # type: ignore[arg-type]
            if cls.kind == "mixed":
                tasks = [t for t in sc.traffic.classes if t.weight > 0]
                rng = ctx.rng_for(cls.kind, ordinal)
                senders.append((runner, rng, tasks, task_deal(ctx, tasks, ordinal)))
            else:
                tasks = [t for t in sc.traffic.classes if t.kind == cls.kind and t.weight > 0]
                rng = ctx.rng_for(cls.kind, ordinal)
                senders.append((runner, rng, pick_task(tasks, rng) if tasks else None, None))
    lines: list[bytes] = []
    for _ in range(per_user):
        for runner, rng, tasks, deal in senders:
            task_cfg = pick_task(tasks, rng, deal) if isinstance(tasks, list) else tasks
            if task_cfg is None:
                continue
            try:
                if task_cfg.kind == "multi_turn":
                    runner.conversation(task_cfg, rng, 0.0)
                else:
                    runner.single(task_cfg, rng, 0.0)
            except _Built:
                pass
            body = built.pop()
            thinks: list[float] = []
            if task_cfg.kind == "multi_turn":
                # the conversation's other turns, each after its think time (drawn as the scenario
                # draws them, from a generator of its own: the user's was spent on the first turn)
                conv = ctx.prompt_sources[task_cfg.name].conversation(random.Random(len(lines)))
                thinks = [conv.think_time_s(turn) for turn in range(1, conv.turns)]
            thinks.append(task_cfg.think_time_s.sample(rng))  # the draw the user makes after each request
            lines.extend(b"%.3f\t" % think + body for think in thinks)
    return lines


def write_bodies(path: Path, bodies: list[bytes]) -> None:
    """One ``THINK_S<TAB>BODY`` a line (orjson writes no newline inside a body)."""
    with open(path, "wb") as fh:
        for b in bodies:
            fh.write(b + b"\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--host", required=True, help="the server (its model and /tokenize are used)")
    ap.add_argument("--users", type=int, default=96)
    ap.add_argument("--per-user", type=int, default=20)
    ap.add_argument("--set", action="append", default=[], help="a scenario override, as tokenswarm's --set")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    bodies = build_bodies(args.scenario, args.host, args.users, args.per_user, args.set)
    write_bodies(args.out, bodies)
    print(f"{len(bodies)} bodies -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

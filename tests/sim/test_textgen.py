"""The target text is a deterministic function of prompt and sampling parameters."""

from tokenswarm.sim.samples import code_prompt, qa_prompt, summarization_prompt
from tokenswarm.sim.textgen import NgramIndex, TargetText, copy_probability
from tokenswarm.sim.tokenizer import tokenize


def _text(prompt, n=60, **kw):
    t = TargetText(tokenize(prompt), **kw)
    t.ensure(n)
    return "".join(t.tokens[:n])


def test_same_inputs_same_text_and_seed_ignored_when_greedy():
    p = code_prompt(1)
    assert _text(p, temperature=0.0, seed=1) == _text(p, temperature=0.0, seed=2)
    assert _text(p, temperature=0.0) != _text(code_prompt(2), temperature=0.0)


def test_sampling_text_depends_on_seed_and_temperature():
    p = qa_prompt(3)
    assert _text(p, temperature=0.8, seed=1) == _text(p, temperature=0.8, seed=1)
    assert _text(p, temperature=0.8, seed=1) != _text(p, temperature=0.8, seed=2)
    assert _text(p, temperature=0.8, seed=1) != _text(p, temperature=0.0)


def test_copy_probability_ranks_code_and_documents_above_short_questions():
    code = copy_probability(tokenize(code_prompt(0)))
    doc = copy_probability(tokenize(summarization_prompt(0)))
    qa = copy_probability(tokenize(qa_prompt(0)))
    assert code > 0.6 and doc > 0.6 and qa < 0.3


def test_draft_agrees_more_on_copied_than_on_fresh_tokens():
    t = TargetText(tokenize(code_prompt(0)))
    t.ensure(4000)
    copied = [t.draft_correct(i) for i in range(4000) if t.copied[i]]
    fresh = [t.draft_correct(i) for i in range(4000) if not t.copied[i]]
    assert sum(copied) / len(copied) > 0.8 > 0.4 > sum(fresh) / len(fresh)


def test_ngram_proposes_what_followed_in_the_prompt():
    src = tokenize("start alpha beta gamma delta epsilon")
    idx = NgramIndex(src, 2, 3)
    assert idx.propose(tokenize("x alpha beta"), 2) == [" gamma", " delta"]
    assert idx.propose(tokenize("zeta eta"), 2) == []


def test_generating_ahead_in_blocks_changes_no_position():
    src = tokenize(code_prompt(4))
    one_by_one, at_once = TargetText(src, temperature=0.7, seed=3), TargetText(src, temperature=0.7, seed=3)
    accepted = []
    for i in range(1, 301):  # the engine's access pattern: one position, then a draft window
        one_by_one.token(i - 1)
        accepted.append(one_by_one.draft_accepted(i - 1, 4))
    at_once.ensure(400)
    assert accepted == [at_once.draft_accepted(i - 1, 4) for i in range(1, 301)]
    assert one_by_one.tokens[:300] == at_once.tokens[:300]
    assert one_by_one.draft_hit[:300] == at_once.draft_hit[:300]
    assert [at_once.draft_correct(i) for i in range(300)] == at_once.draft_hit[:300]

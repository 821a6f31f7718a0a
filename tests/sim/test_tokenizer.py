"""The simulator's tokenizer is exact, deterministic and BPE-like in density."""

from tokenswarm.sim.tokenizer import chat_prompt, detokenize, token_ids, tokenize


def test_decoding_is_the_exact_concatenation_of_tokens():
    samples = ["Hello, world!", "  leading and trailing  ", "def f(x):\n\treturn x**2\n", "ünïcödé wörds", "", "\n\n"]
    for s in samples:
        assert detokenize(tokenize(s)) == s


def test_words_punctuation_and_whitespace_split_as_documented():
    assert tokenize("Hi, you!") == ["Hi", ",", " you", "!"]
    assert tokenize("internationalization") == ["internat", "ionaliza", "tion"]
    assert tokenize("a  \n") == ["a", "  \n"]


def test_ids_are_stable_and_in_range():
    toks = tokenize("the same words the same")
    ids = token_ids(toks)
    assert ids == token_ids(toks)
    assert ids[0] != ids[1] and ids[1] == token_ids([" same"])[0]
    assert all(0 <= i < 128_000 for i in ids)


def test_chat_template_renders_roles_and_generation_prompt():
    p = chat_prompt([{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    assert p == "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"

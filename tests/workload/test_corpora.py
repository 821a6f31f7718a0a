"""Built-in corpora are found offline (also from a venv); user datasets load with file:line errors."""

import json
import os
import random
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tokenswarm.workload.corpora import (
    DatasetError,
    documented_functions,
    load_dataset,
    prose_corpus,
    stdlib_dir,
    stdlib_sources,
    top_level_defs,
)
from tokenswarm.workload.scenario import ScenarioError

REPO = Path(__file__).resolve().parents[2]


def test_stdlib_sources_exclude_tests_and_site_packages():
    files = stdlib_sources()
    assert "json/decoder.py" in files
    assert len(files) > 300
    assert not any(f.startswith(("test/", "site-packages/")) or "/tests/" in f for f in files)
    assert list(files) == sorted(files)
    assert (stdlib_dir() / files[0]).is_file()


def test_stdlib_sources_are_every_library_file_of_a_useful_size_by_its_path_relative_to_the_library():
    from tokenswarm.workload.corpora import builtin

    root, expected = stdlib_dir(), []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in builtin._SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if (name.endswith(".py") and not name.startswith("test_")
                    and builtin._MIN_SOURCE_BYTES <= os.path.getsize(full) <= builtin._MAX_SOURCE_BYTES):
                expected.append(os.path.relpath(full, root).replace(os.sep, "/"))
    assert stdlib_sources() == tuple(sorted(expected))
    assert any("/" in f for f in stdlib_sources())  # files in packages keep their directory


def test_documented_functions_come_from_real_source():
    funcs = documented_functions("json/__init__.py")
    names = {f.name for f in funcs}
    assert {"dumps", "loads"} <= names
    text = (stdlib_dir() / "json/__init__.py").read_text()
    loads = next(f for f in funcs if f.name == "loads")
    assert text[loads.offset :].startswith("def loads(")


def test_a_code_subset_is_parsed_at_start_and_an_excerpt_only_subset_skips_the_functions():
    from tokenswarm.workload.corpora import code_corpus
    from tokenswarm.workload.corpora.builtin import read_source

    for cached in (read_source, top_level_defs, documented_functions):
        cached.cache_clear()
    excerpts = code_corpus().subset(random.Random(1), 8, functions=False)
    assert read_source.cache_info().currsize == top_level_defs.cache_info().currsize == 8
    assert documented_functions.cache_info().currsize == 0  # nothing a prompt of this source uses
    code = code_corpus().subset(random.Random(2), 8)
    assert documented_functions.cache_info().currsize == 8  # code generation's functions, ready before the run
    assert code.files != excerpts.files and len(code.files) == 8


def test_top_level_definitions_and_documented_functions_are_numbered_by_line_feeds():
    from tokenswarm.workload.corpora.builtin import _def_lines

    text = "import os\r\nclass A:\n    def m(self): pass\n\ndef f():\n  x\x0c\nasync def g():\n    pass"
    lines = text.split("\n")  # a form feed or a carriage return does not end a line
    starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    assert list(_def_lines(text)) == [(1, starts[1]), (4, starts[4]), (6, starts[6])]
    for rel in stdlib_sources()[:40]:  # and on real files, the same as reading them line by line
        text = (stdlib_dir() / rel).read_text(encoding="utf-8", errors="replace")
        expected, at = [], 0
        for i, line in enumerate(text.split("\n")):
            if line.startswith(("def ", "class ", "async def ")):
                expected.append((i + 1, at))
            at += len(line) + 1
        assert list(top_level_defs(rel)) == expected, rel
        for f in documented_functions(rel):
            assert f.line == text.count("\n", 0, f.offset) + 1 and text[f.offset:].lstrip().startswith(
                ("def ", "async def ")), (rel, f.name)


def test_documented_functions_are_the_docstring_defs_that_begin_a_line_whatever_else_holds_def():
    import re

    from tokenswarm.workload.corpora.builtin import _DOCUMENTED_DEF, _def_lines, _documented_defs

    # the specification: the pattern tried at every line start, matches in order, none overlapping
    at_every_line = re.compile("^" + _DOCUMENTED_DEF.pattern, _DOCUMENTED_DEF.flags | re.MULTILINE)
    doc = '"""' + "d" * 45 + '"""'
    texts = [
        "def first(x):\n    " + doc + "\n",                                   # the file's first line
        'x = "def"; y = 1\ndef after_a_string(a, b=(1, 2)):\n  ' + doc + "\n",   # "def" mid-line first
        "def a():\n    " + '"""short"""; def b():\n    ' + doc + "\n",         # a def after a match, same line
        "class A:\n    async def m(self):\n\t" + doc + "\n    def\tn(self) -> int:\n      " + doc,
        "def undocumented():\n    pass\ndefinitely = 1\n  def inner():\n   r" + doc,
    ]
    texts += [(stdlib_dir() / rel).read_text(encoding="utf-8", errors="replace") for rel in stdlib_sources()[::25]]
    for text in texts:
        found = [(m.start(), m.group("name"), m.group("doc")) for m in _documented_defs(text)]
        assert found == [(m.start(), m.group("name"), m.group("doc")) for m in at_every_line.finditer(text)]
    assert [m.group("name") for m in _documented_defs(texts[2])] == ["a"]  # b's line began inside a's match
    assert list(_def_lines(texts[0])) == [(0, 0)]  # a definition on the first line counts too


def test_prose_corpus_is_pydoc_topics():
    corpus = prose_corpus()
    assert len(corpus.topics) > 50
    assert any(t.key == "for" and '"for"' in t.title for t in corpus.topics)
    assert len(corpus.text) > 100_000


def test_corpora_available_inside_a_fresh_venv(tmp_path):
    """sysconfig's stdlib path must work from a venv (where sys.prefix is not the base prefix)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    code = textwrap.dedent("""\
        import sys
        from tokenswarm.workload.corpora import stdlib_sources, prose_corpus
        assert sys.prefix != sys.base_prefix
        print(len(stdlib_sources()), len(prose_corpus().topics))
        """)
    # the project's dependencies (yaml) come from the test interpreter's site-packages
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])}
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    n_files, n_topics = map(int, out.stdout.split())
    assert n_files == len(stdlib_sources()) and n_topics == len(prose_corpus().topics)


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_jsonl_prompt_and_messages_lines_load_with_their_line_numbers_skipping_blank_lines(tmp_path):
    p = write(
        tmp_path / "d.jsonl",
        "\n".join(
            [
                json.dumps({"prompt": "What is 2+2?", "max_tokens": 8, "id": "ignored"}),
                "",
                json.dumps(
                    {
                        "messages": [
                            {"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello"},
                            {"role": "user", "content": "Bye"},
                        ]
                    }
                ),
            ]
        ),
    )
    items = load_dataset(p)
    assert len(items) == 2
    assert items[0].prompt == "What is 2+2?" and items[0].max_tokens == 8 and items[0].where == "d.jsonl:1"
    assert items[1].user_turns == ("Hi", "Bye") and items[1].where == "d.jsonl:3"
    assert [m["role"] for m in items[1].first_messages()] == ["system", "user"]
    assert items[1].as_text().endswith("User: Hi\n\nAssistant:")


@pytest.mark.parametrize(
    "lines, line, expected",
    [
        (
            ['{"prompt": "ok"}', '{"prompt": "x", "max_tokens": -3}'],
            2,
            "'max_tokens' to be a positive integer",
        ),
        (['{"prompt": "ok"}', '{"text": "x"}'], 2, "a 'prompt' string or a 'messages' list"),
        (['{"prompt": "ok"}', "", "{oops"], 3, "one JSON object per line"),
        (['{"messages": [{"role": "robot", "content": "x"}]}'], 1, "messages[0]"),
        (['{"messages": [{"role": "assistant", "content": "x"}]}'], 1, "a user message"),
        (['["prompt"]'], 1, "a JSON object"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, lines, line, expected):
    p = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as info:
        load_dataset(p, "jsonl")
    err = info.value
    assert isinstance(err, ScenarioError)
    assert err.file == p and err.field == f"line {line}"
    assert str(err).startswith(f"{p}: line {line}: expected ")
    assert expected in str(err)


SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "Tell me a joke"},
            {"from": "gpt", "value": "Why..."},
            {"from": "human", "value": "Another"},
            {"from": "gpt", "value": "OK..."},
        ],
    },
    {"id": "empty", "conversations": []},
    {
        "id": "b",
        "conversations": [
            {"from": "system", "value": "You are terse."},
            {"from": "human", "value": "Define TTFT"},
        ],
    },
]


def test_sharegpt_json_array_and_jsonl_agree(tmp_path):
    arr = write(tmp_path / "sg.json", json.dumps(SHAREGPT, indent=2))
    jl = write(tmp_path / "sg.jsonl", "\n".join(json.dumps(x) for x in SHAREGPT))
    a, b = load_dataset(arr), load_dataset(jl)
    assert (
        [i.user_turns for i in a]
        == [i.user_turns for i in b]
        == [("Tell me a joke", "Another"), ("Define TTFT",)]
    )
    assert a[1].messages[0] == {"role": "system", "content": "You are terse."}
    assert b[1].where == "sg.jsonl:3"
    assert a[0].where == "sg.json:2"  # element's line inside the pretty-printed array


def test_sharegpt_errors_name_the_line_of_the_element(tmp_path):
    bad = SHAREGPT + [{"conversations": [{"from": "alien", "value": "x"}]}]
    p = write(tmp_path / "bad.json", json.dumps(bad, indent=1))
    text = Path(p).read_text()
    expected_line = text[: text.index('"alien"')].count("\n") - 3
    with pytest.raises(DatasetError) as info:
        load_dataset(p, "sharegpt")
    assert info.value.field.startswith("line ")
    assert abs(int(info.value.field.split()[1]) - expected_line) <= 2
    assert "conversations[0].from" in str(info.value)


def test_sharegpt_with_no_usable_conversation(tmp_path):
    p = write(tmp_path / "empty.json", json.dumps([{"conversations": []}]))
    with pytest.raises(DatasetError) as info:
        load_dataset(p)
    assert info.value.field == "file" and "at least one usable" in str(info.value)


def test_a_missing_dataset_file_is_refused_saying_what_was_expected(tmp_path):
    with pytest.raises(DatasetError) as info:
        load_dataset(str(tmp_path / "nope.jsonl"))
    assert "an existing readable dataset file" in str(info.value)

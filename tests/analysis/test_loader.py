"""Reading run directories: formats, truncation and error messages."""

import gzip
import json

import numpy as np
import orjson
import pytest

from tests.analysis.runfactory import failed, record, write_run
from tokenswarm.analysis import NoSuccessError, RunInputError, analyse, load_run


def _recs(n=30):
    return [record(i, chunk_offsets_ms=[10.0 + i, 20.0 + i, 35.0 + i], chunk_tokens=[1, 2, 3]) for i in range(n)]


def _same(a, b):
    for name in ("ttft_ms", "e2e_ms", "sent_at_s", "output_tokens"):
        np.testing.assert_array_equal(a[name], b[name])
    np.testing.assert_array_equal(a.gap_ms, b.gap_ms)
    np.testing.assert_array_equal(a.gap_tokens, b.gap_tokens)


def test_gzip_and_rotated_files_read_like_plain(tmp_path):
    plain = load_run(write_run(tmp_path / "plain", _recs()))
    _same(plain, load_run(write_run(tmp_path / "gz", _recs(), gz=True)))
    rotated = load_run(write_run(tmp_path / "rot", _recs(), rotate=7))
    assert len(rotated.files) == 5 and rotated.files[0].endswith("records-000001.jsonl")
    _same(plain, rotated)
    _same(plain, load_run(write_run(tmp_path / "rotgz", _recs(), rotate=7, gz=True)))


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    path = write_run(tmp_path / "run", _recs(10), tail=orjson.dumps(record(99))[:57])
    run = load_run(path)
    assert len(run) == 10
    assert any("truncated last line" in w and "records.jsonl:11" in w for w in run.warnings)


def test_truncated_gzip_stream_keeps_complete_records_with_a_warning(tmp_path):
    path = write_run(tmp_path / "run", _recs(200), gz=True)
    gz = path / "records.jsonl.gz"
    gz.write_bytes(gz.read_bytes()[:-30])
    run = load_run(path)
    assert 150 < len(run) <= 200
    assert any("cut short" in w or "truncated" in w for w in run.warnings)


def test_broken_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path):
    path = write_run(tmp_path / "run", _recs(5))
    lines = (path / "records.jsonl").read_bytes().split(b"\n")
    lines[2] = lines[2][:40]
    (path / "records.jsonl").write_bytes(b"\n".join(lines))
    with pytest.raises(RunInputError, match=r"records.jsonl:3: not valid JSON"):
        load_run(path)


def test_missing_manifest_unknown_version_and_missing_records(tmp_path):
    with pytest.raises(RunInputError, match="not a run directory"):
        load_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunInputError, match=r"manifest.json: missing"):
        load_run(tmp_path / "empty")
    path = write_run(tmp_path / "v9", _recs(2), format_version=9)
    with pytest.raises(RunInputError, match=r"manifest.json: unknown format_version 9"):
        load_run(path)
    path = write_run(tmp_path / "trunc", _recs(2))
    (path / "manifest.json").write_bytes(b'{"format_version": 1, "run_')
    with pytest.raises(RunInputError, match=r"manifest.json: truncated or not valid JSON"):
        load_run(path)
    path = write_run(tmp_path / "norec", _recs(2))
    (path / "records.jsonl").unlink()
    with pytest.raises(RunInputError, match="no records file"):
        load_run(path)


def test_record_missing_a_required_field_names_it(tmp_path):
    path = write_run(tmp_path / "run", _recs(3))
    bad = record(5)
    del bad["request_key"]
    with open(path / "records.jsonl", "ab") as fh:
        fh.write(orjson.dumps(bad) + b"\n" + orjson.dumps(record(6)) + b"\n")
    with pytest.raises(RunInputError, match=r"records.jsonl:4: missing required field 'request_key'"):
        load_run(path)


def test_non_compact_json_lines_are_read_too(tmp_path):
    import json

    path = write_run(tmp_path / "run", [])
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _recs(4)))  # spaces after ':'
    _same(load_run(path), load_run(write_run(tmp_path / "compact", _recs(4))))


def test_run_without_success_raises_no_success(tmp_path):
    path = write_run(tmp_path / "run", [failed(i) for i in range(4)])
    with pytest.raises(NoSuccessError, match="no successful request among 4 records"):
        analyse(load_run(path))


def test_mismatched_chunk_tokens_are_treated_as_unknown(tmp_path):
    recs = [record(0, chunk_offsets_ms=[1.0, 2.0, 3.0], chunk_tokens=[1, 1])] + _recs(2)
    run = load_run(write_run(tmp_path / "run", recs))
    assert not run["has_chunk_tokens"][0] and run["has_chunk_tokens"][1]
    assert any("different length" in w for w in run.warnings)


def test_gzip_helper_really_wrote_gzip(tmp_path):
    path = write_run(tmp_path / "gz", _recs(2), gz=True)
    assert gzip.decompress((path / "records.jsonl.gz").read_bytes()).count(b"\n") == 2


@pytest.mark.parametrize("field, value, shown", [
    ("output_tokens", 10**30, "1e+30"),  # what a server's 10**30 once became: 1.7e32 tok/s in a report
    ("output_tokens", -4, "-4"),
    ("prompt_tokens", 2**53, str(2**53)),
])
def test_an_implausible_token_count_is_refused_naming_the_file_and_line(tmp_path, field, value, shown):
    records = [record(0), record(1), record(2)]
    records[1][field] = value
    run = tmp_path / "run"
    run.mkdir()
    write_run(run, [])
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(RunInputError) as err:
        load_run(run)
    assert str(err.value).startswith(f"{run / 'records.jsonl'}:2: field {field!r} is ")
    assert "not a plausible token count" in str(err.value)


@pytest.mark.parametrize("toks", [[1, -3, 1, 1], [1, 1, 1, 10**12]])
def test_an_implausible_chunk_token_count_is_refused_naming_the_file_and_line(tmp_path, toks):
    run = write_run(tmp_path / "run", [record(0), record(1), record(2, chunk_tokens=toks, output_tokens=4)])
    with pytest.raises(RunInputError, match=r"records\.jsonl:3: field 'chunk_tokens' holds -?\d+, not a plausible"):
        load_run(run)

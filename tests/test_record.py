"""The per-request record's serialisation and copies keep every field, in schema order."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from tokenswarm.record import FIELD_NAMES, REQUIRED_FIELDS, RequestRecord, build_record


def _record(**kw) -> RequestRecord:
    base = dict(run_id="r", worker_id="w", seq=-1, task="qa", user_class="QAUser", outcome="ok",
                request_key="k", scheduled_at_s=1.5, sent_at_s=1.6, ttft_ms=12.5, chunk_offsets_ms=[12.5, 22.5],
                chunk_tokens=[1, 2], spec_decode={"num_spec_steps": 3}, extra={"a": [1, None]})
    base.update(kw)
    return RequestRecord(**base)


def test_to_dict_has_every_field_in_schema_order_with_nones_kept():
    d = _record().to_dict()
    assert tuple(d) == FIELD_NAMES
    assert d["e2e_ms"] is None and d["ttft_ms"] == 12.5 and d["extra"] == {"a": [1, None]}


def test_to_json_is_the_dict_as_json():
    r = _record(output_text="h\u00e9llo \"quoted\"\n", temperature=0.0)
    assert r.to_json() == orjson.dumps(r.to_dict())
    assert list(orjson.loads(r.to_json())) == list(FIELD_NAMES)


def test_with_seq_changes_only_the_sequence_number_and_leaves_the_original_alone():
    r = _record()
    s = r.with_seq(42)
    assert s.seq == 42 and r.seq == -1
    assert s == dataclasses.replace(r, seq=42)
    assert all(getattr(s, f) is getattr(r, f) for f in FIELD_NAMES if f != "seq")


def test_every_field_has_a_one_line_description_for_the_record_reference():
    from tokenswarm.record import FIELD_DOCS

    assert list(FIELD_DOCS) == list(FIELD_NAMES)  # every field, in schema order, nothing else
    assert all(text.strip() and "\n" not in text for text in FIELD_DOCS.values())


def test_the_request_phase_fields_are_optional_appended_and_unobserved_by_default():
    from tokenswarm.record import FORMAT_VERSION, REQUIRED_FIELDS, record_from_dict

    phases = ("conn_reused", "connect_ms", "send_delay_ms", "headers_ms")
    first = FIELD_NAMES.index("extra") + 1  # the last field of the first format: later fields are appended
    # 2: version 1 with two fields renamed to carry their unit; 3: the scenario echo's max_tokens
    # (no record field); appending optional fields never bumps it
    assert FIELD_NAMES[first:first + len(phases)] == phases and FORMAT_VERSION == 3
    assert not set(phases) & set(REQUIRED_FIELDS)
    older = {k: v for k, v in _record().to_dict().items() if k not in phases}  # written before they existed
    r = record_from_dict(older)
    assert all(getattr(r, f) is None for f in phases)


def test_numbered_sets_an_unnumbered_record_in_place_and_copies_a_numbered_one():
    from tokenswarm.record import UNNUMBERED

    r = _record()
    assert r.seq == UNNUMBERED
    expected = dataclasses.replace(r, seq=7)
    n = r.numbered(7)
    assert n is r and n == expected  # just built, seen by nobody: no copy
    again = n.numbered(8)  # already numbered (emitted): the emitted one is left alone
    assert again is not n and n.seq == 7 and again == dataclasses.replace(expected, seq=8)


@pytest.fixture(params=["c", "python"])
def builder(request, monkeypatch):
    """build_record through the C builder (when the extension is built) and through Python."""
    from tokenswarm import record
    from tokenswarm.wire import native  # noqa: F401  # installs the C builder when it is built

    if request.param == "python":
        monkeypatch.setattr(record, "_native_build", None)
    elif record._native_build is None:
        pytest.skip("the C extension is not built or is turned off")
    return request.param


def test_build_record_gives_the_record_the_constructor_gives(builder):
    full = {name: f"v-{name}" for name in FIELD_NAMES}
    for fields in (full, _record().to_dict(), {name: full[name] for name in REQUIRED_FIELDS}):
        built = build_record(dict(fields))
        assert built == RequestRecord(**fields) and built.to_json() == RequestRecord(**fields).to_json()
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.seq = 3  # type: ignore[misc]  # still immutable


def test_build_record_takes_the_identity_apart_and_the_fields_win_over_it(builder):
    from tokenswarm.record import IDENTITY_FIELDS, RecordIdentity

    identity = RecordIdentity(run_id="r", worker_id="w0", task="qa", user_class="QAUser", request_key="k",
                              scheduled_at_s=1.5, session_id="s1", turn=2, max_tokens=64)
    measured = {"outcome": "ok", "sent_at_s": 1.6, "schedule_lag_ms": 0.25, "ttft_ms": 12.5}
    built = build_record(dict(measured), identity)
    expected = RequestRecord(**{**identity.record_fields(), **measured})
    assert built == expected and built.to_json() == expected.to_json()
    assert built.schedule_lag_ms == 0.25 and identity.schedule_lag_ms is None  # the measured value wins
    assert {n: getattr(built, n) for n in IDENTITY_FIELDS if n != "schedule_lag_ms"} == {
        n: getattr(identity, n) for n in IDENTITY_FIELDS if n != "schedule_lag_ms"}


def test_build_record_refuses_a_missing_required_field_and_an_unknown_one_by_name(builder):
    from tokenswarm.record import RecordIdentity

    identity = RecordIdentity(run_id="r", worker_id="w0", task="qa", user_class="QAUser", request_key="k",
                              scheduled_at_s=1.5)
    with pytest.raises(TypeError, match="missing required field 'outcome'"):
        build_record({"sent_at_s": 1.6}, identity)
    with pytest.raises(TypeError, match="unknown field\\(s\\) e2e_seconds"):
        build_record({"outcome": "ok", "sent_at_s": 1.6, "e2e_seconds": 1.0}, identity)
def test_build_record_refuses_a_missing_required_field_and_an_unknown_one_by_name_without_identity(builder):
    fields = _record().to_dict()
    del fields["sent_at_s"]
    with pytest.raises(TypeError, match="missing required field 'sent_at_s'"):
        build_record(fields)
    with pytest.raises(TypeError, match="unknown field\\(s\\) e2e_seconds"):
        build_record({**_record().to_dict(), "e2e_seconds": 1.0})

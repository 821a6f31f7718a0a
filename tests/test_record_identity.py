"""The record's identity is a typed value whose fields are the record's own."""

from __future__ import annotations

import dataclasses

import pytest

from tokenswarm.record import FIELD_NAMES, IDENTITY_FIELDS, RecordIdentity, RequestRecord


def an_identity() -> RecordIdentity:
    return RecordIdentity(run_id="r", worker_id="w0", task="qa", user_class="QAUser", request_key="k",
                          scheduled_at_s=1_764_480_000.0, schedule_lag_ms=0.5, step=2, phase="steady")


def test_every_identity_field_is_a_record_field_of_the_same_name():
    assert [name for name in IDENTITY_FIELDS if name not in FIELD_NAMES] == []


def test_a_record_is_built_from_the_identity_and_what_the_client_measured():
    ident = an_identity()
    rec = RequestRecord(**{**ident, "schedule_lag_ms": 0.7}, outcome="ok", sent_at_s=1_764_480_000.0007)
    assert (rec.task, rec.step, rec.phase, rec.seq, rec.schedule_lag_ms) == ("qa", 2, "steady", -1, 0.7)
    assert RequestRecord(**ident.record_fields(), outcome="ok", sent_at_s=0.0).request_key == "k"


def test_the_identity_is_frozen_and_reads_like_a_mapping_of_its_fields():
    ident = an_identity()
    with pytest.raises(dataclasses.FrozenInstanceError):
        ident.task = "code"  # type: ignore[misc]
    assert ident["task"] == "qa" and list(ident.keys()) == list(IDENTITY_FIELDS)
    assert dict(**ident) == ident.record_fields()

"""The analysis loader and the record cannot drift apart: every record field is read or deliberately ignored."""

from __future__ import annotations

import dataclasses

from tokenswarm.analysis.loader.records import IGNORED_FIELDS, READ_FIELDS
from tokenswarm.record import RequestRecord

RECORD_FIELDS = [f.name for f in dataclasses.fields(RequestRecord)]


def test_every_record_field_is_read_by_the_loader_or_ignored_with_a_reason():
    unaccounted = [name for name in RECORD_FIELDS if name not in READ_FIELDS and name not in IGNORED_FIELDS]
    assert unaccounted == [], (
        f"RequestRecord fields neither read by analysis.loader.records nor listed in IGNORED_FIELDS: {unaccounted}")


def test_the_loader_reads_no_field_the_record_does_not_have():
    assert [name for name in READ_FIELDS if name not in RECORD_FIELDS] == []


def test_an_ignored_field_exists_is_not_also_read_and_has_a_reason():
    for name, reason in IGNORED_FIELDS.items():
        assert name in RECORD_FIELDS, f"{name}: ignored but not a record field (remove it from IGNORED_FIELDS)"
        assert name not in READ_FIELDS, f"{name}: listed as ignored but the loader reads it"
        assert len(reason.split()) >= 5, f"{name}: give a reason, not a label"

"""Specification of kubejury.records.timestamps: the one Kubernetes time format, written and read."""

from __future__ import annotations

import datetime

import pytest

from kubejury.records import timestamps


def test_format_time_writes_utc_whole_seconds_with_a_z_as_kubernetes_does() -> None:
    moment = datetime.datetime(
        2026, 12, 1, 4, 4, 5, 987654, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert timestamps.format_time(moment) == "2026-12-01T03:04:05Z"


def test_parse_time_reads_what_format_time_writes() -> None:
    moment = datetime.datetime(2026, 12, 1, 3, 4, 5, tzinfo=datetime.UTC)
    assert timestamps.parse_time(timestamps.format_time(moment)) == moment


def test_parse_time_accepts_fractions_and_offsets_and_takes_a_naive_time_as_utc() -> None:
    assert timestamps.parse_time("2026-12-01T03:04:05.5Z") == datetime.datetime(
        2026, 12, 1, 3, 4, 5, 500000, tzinfo=datetime.UTC
    )
    assert timestamps.parse_time("2026-12-01T04:04:05+01:00") == datetime.datetime(
        2026, 12, 1, 3, 4, 5, tzinfo=datetime.UTC
    )
    assert timestamps.parse_time("2026-12-01T03:04:05") == datetime.datetime(
        2026, 12, 1, 3, 4, 5, tzinfo=datetime.UTC
    )


def test_parse_time_keeps_a_missing_time_missing() -> None:
    assert timestamps.parse_time(None) is None
    assert timestamps.parse_time("") is None


def test_parse_time_refuses_text_that_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        timestamps.parse_time("yesterday")


def test_now_time_is_the_current_time_in_the_kubernetes_format() -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    written = timestamps.now_time()
    after = datetime.datetime.now(datetime.UTC)
    parsed = timestamps.parse_time(written)
    assert written.endswith("Z") and len(written) == len("2026-12-01T03:04:05Z")
    assert parsed is not None and before <= parsed <= after


def test_seconds_between_counts_forward_and_never_below_zero() -> None:
    assert timestamps.seconds_between("2026-12-01T03:04:05Z", "2026-12-01T03:05:06Z") == 61.0
    assert timestamps.seconds_between("2026-12-01T03:05:06Z", "2026-12-01T03:04:05Z") == 0.0
    assert timestamps.seconds_between(None, "2026-12-01T03:04:05Z") == 0.0
    assert timestamps.seconds_between("2026-12-01T03:04:05Z", None) == 0.0

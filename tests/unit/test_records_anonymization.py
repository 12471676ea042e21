"""The anonymization map: written once per series by the first judging Job, compared by every later one.

It crosses processes (one judge Job writes it, the next ones and a person auditing the run read it),
so it is one frozen record with one reader, like every other document in ``kubejury.records``.
"""

from __future__ import annotations

import pytest

from kubejury.judging.anonymize import mapping_document, opaque_ids
from kubejury.records.anonymization import AnonymizationMap
from kubejury.records.results import RecordFormatError

MODELS = ("qwen3-8b", "gemma-3-12b", "llama-3.1-8b")


def test_the_stored_form_keeps_series_seed_and_ids_to_models_sorted_by_model() -> None:
    ids = opaque_ids(MODELS, seed=7)
    document = mapping_document(ids, 7, "primary")
    assert document == AnonymizationMap(series="primary", seed=7, ids={i: m for m, i in sorted(ids.items())})
    assert document.to_json() == {
        "series": "primary",
        "seed": 7,
        "ids": {i: m for m, i in sorted(ids.items())},
    }
    assert list(document.to_json()["ids"].values()) == sorted(MODELS)


def test_what_a_judging_job_wrote_reads_back_equal_so_the_next_job_does_not_rewrite_it() -> None:
    document = mapping_document(opaque_ids(MODELS, seed=3), 3, "t0")
    assert AnonymizationMap.from_json(document.to_json()) == document


def test_the_model_of_an_opaque_id_is_looked_up_on_the_record() -> None:
    ids = opaque_ids(MODELS, seed=1)
    document = mapping_document(ids, 1, "primary")
    assert {document.model_of(ident) for ident in ids.values()} == set(MODELS)
    assert document.model_of("no-such-id") is None


@pytest.mark.parametrize(
    ("stored", "field"),
    [
        ({"seed": 1, "ids": {}}, "series"),
        ({"series": "p", "seed": "1", "ids": {}}, "seed"),
        ({"series": "p", "seed": 1, "ids": ["a"]}, "ids"),
        ({"series": "p", "seed": 1, "ids": {"a": 3}}, "ids.a"),
    ],
)
def test_a_map_that_does_not_read_is_refused_naming_the_field(stored: dict[str, object], field: str) -> None:
    with pytest.raises(RecordFormatError, match=f"anonymization map field '{field}'"):
        AnonymizationMap.from_json(stored)

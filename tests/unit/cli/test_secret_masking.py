"""URL passwords masked at every door, with the one function ``model.masking.mask_url``: the renderings both
backends' CLI paths share (`-o yaml|json`, `describe dataset`), error sentences, materialisation outcomes and the
long-running processes' logs. Objects are built as an older version may have stored them: password in clear."""

from __future__ import annotations

import io
import logging
from concurrent.futures import Future
from datetime import UTC, datetime

import pytest
from rich.console import Console

from phalanx.adapters.datasources import Materialized
from phalanx.entrypoints.cli.output import Failure, fail, spec_errors, warn
from phalanx.entrypoints.cli.render import as_wire
from phalanx.entrypoints.cli.render_data import print_dataset_description
from phalanx.entrypoints.masked_logging import MaskingFilter, mask_log_handlers
from phalanx.model.datasets import Dataset
from phalanx.model.events import Event
from phalanx.model.loading import dump_json, dump_yaml
from phalanx.model.masking import mask_url, mask_urls_in
from phalanx.services.dataset_manager import materialize_outcome
from phalanx.services.dataset_views import DatasetDescription

PASSWORD = "hunter2-Pw"
URL = f"postgresql://reader:{PASSWORD}@db.example:5432/sales"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored_dataset() -> Dataset:
    return Dataset.model_validate(
        {
            "metadata": {"name": "sales", "namespace": "default", "creationTimestamp": NOW.isoformat()},
            "spec": {"source": {"sql": {"url": URL, "query": "SELECT 1"}}},
            "status": {"phase": "Failed", "message": f"cannot connect to {URL}", "lineage": f"sql on {URL}"},
        }
    )


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (URL, "postgresql://reader:***@db.example:5432/sales"),
        ("postgresql://u:p@ss@host/db", "postgresql://u:***@host/db"),  # an unescaped @ in the password
        ("mysql://u@h/db?password=hunter2&x=1", "mysql://u@h/db?password=***&x=1"),
        (
            f"error: cannot connect to {URL}: refused",
            "error: cannot connect to postgresql://reader:***@db.example:5432/sales: refused",
        ),
        ("https://example.org/a:b@c", "https://example.org/a:b@c"),
        ("no url here", "no url here"),
    ],
)
def test_mask_url_in_urls_and_sentences(text: str, masked: str) -> None:
    assert mask_url(text) == masked


def test_mask_urls_in_walks_wire_forms() -> None:
    assert mask_urls_in({"a": [URL, {"b": URL}], "n": 3, "none": None}) == {
        "a": [mask_url(URL), {"b": mask_url(URL)}],
        "n": 3,
        "none": None,
    }


@pytest.mark.parametrize("dump", [dump_yaml, dump_json], ids=["yaml", "json"])
def test_wire_output_of_datasets_is_masked(dump: object) -> None:
    text = dump(as_wire([stored_dataset(), stored_dataset()]))  # type: ignore[operator]
    assert PASSWORD not in text
    assert "reader:***@db.example" in text


def test_describe_dataset_masks_source_lineage_message_and_events() -> None:
    event = Event(
        object_kind="Dataset",
        object_name="sales",
        namespace="default",
        type="Warning",
        reason="MaterializeFailed",
        message=f"materialising failed: OperationalError('{URL}')",
        time=NOW,
    )
    out = io.StringIO()
    print_dataset_description(
        Console(file=out, width=400), DatasetDescription(dataset=stored_dataset(), jobs=[], events=[event])
    )
    assert PASSWORD not in out.getvalue()
    assert out.getvalue().count("reader:***@") == 4  # source, lineage, message, event


def test_error_and_warning_sentences_are_masked(capsys: pytest.CaptureFixture[str]) -> None:
    warn(f"cannot reach {URL}")
    with pytest.raises(Failure):
        fail(f"dataset sales: cannot connect to {URL}")
    with pytest.raises(Failure):
        spec_errors("d.yaml", [("spec.source.sql.url", f"{URL!r} is not allowed")])
    err = capsys.readouterr().err
    assert PASSWORD not in err
    assert err.count("reader:***@db.example") == 3


def test_unexpected_materialisation_errors_are_masked() -> None:
    future: Future[Materialized] = Future()
    future.set_exception(RuntimeError(f"driver said: bad DSN {URL}"))
    outcome = materialize_outcome(future, generation=1, now=NOW)
    assert outcome.reason == "MaterializeFailed"
    assert PASSWORD not in outcome.message and PASSWORD not in str(outcome.changes["message"])
    assert "reader:***@db.example" in outcome.message


def test_log_records_and_tracebacks_are_masked() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("test_secret_masking")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    mask_log_handlers(logger)
    try:
        logger.warning("dataset %s: cannot connect to %s", "sales", URL)
        try:
            raise ConnectionError(f"connect failed for {URL}")
        except ConnectionError:
            logger.exception("materialising failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert PASSWORD not in text
    assert "dataset sales: cannot connect to postgresql://reader:***@" in text
    assert "ConnectionError: connect failed for postgresql://reader:***@" in text
    assert [type(f) for f in handler.filters] == [MaskingFilter]

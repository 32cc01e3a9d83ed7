"""The runs' summaries live in their own view footer entry: queries never parse it, runs() does,
a damaged one costs a fold from the log (and audit names the view), and a version-3 view (the
summaries in the main record) still answers runs()."""

import hashlib
import json

import pyarrow.parquet as pq

from tests.store.test_run_summary import equal, messy_root, reference_runs
from tests.store.test_store_view import logged_warnings
from theseus.audit import audit
from theseus.store import Store
from theseus.store.view_file import VIEW_DIGEST, VIEW_METADATA, VIEW_SUMMARY, VIEW_SUMMARY_DIGEST, list_views


def rewrite_footer(path: str, change) -> None:
    """Rewrite the view ``path`` with its key-value metadata passed through ``change``."""
    table = pq.read_table(path)
    metadata = change(dict(table.schema.metadata))
    pq.write_table(table.replace_schema_metadata(metadata), path, write_page_checksum=True)


def damage_summaries(metadata: dict) -> dict:
    text = metadata[VIEW_SUMMARY].replace(b'"nodes":[', b'"nodes":[7,', 1)  # a changed byte, digest kept
    return {**metadata, VIEW_SUMMARY: text}


def view_problems(root) -> list:
    return [p for p in audit(root).problems if "view" in p.kind]


def compacted_messy_root(root) -> tuple[Store, str]:
    store = Store(root)
    messy_root(store)
    store.compact()
    (view,) = list_views(store)
    return store, view


def test_a_query_does_not_parse_the_summaries_and_runs_does(tmp_path):
    root = str(tmp_path)
    store, view = compacted_messy_root(root)
    want = reference_runs(store)
    assert view_problems(root) == []  # a run's latest val/loss is NaN: the same record as the log's NaN
    rewrite_footer(view, damage_summaries)
    cold = Store(root)
    with logged_warnings() as warnings:  # the damaged entry is never read by a query
        top = cold.find().has("train/loss").sort("train/loss").limit(2).select(keys=["train/loss"])
    assert [r["train/loss"] for r in top] == [0.0, 0.5] and warnings == []
    with logged_warnings() as warnings:  # runs() reads it, finds it damaged once, and folds the log
        assert equal(cold.runs(), want)
    assert len(warnings) == 1 and "run summaries" in warnings[0] and view in warnings[0], warnings


def test_a_damaged_summary_entry_is_answered_from_the_log_and_named_by_audit(tmp_path):
    root = str(tmp_path)
    store, view = compacted_messy_root(root)
    want = reference_runs(store)

    rewrite_footer(view, damage_summaries)
    fresh = Store(root)
    assert equal(fresh.runs(), want)  # the log's summaries, not the damaged ones
    assert len(fresh.find().select(keys=["train/loss"])) == len(Store(root).find().select(keys=["train/loss"]))
    problems = view_problems(root)
    assert [p.kind for p in problems] == ["corrupt-view"] and "run summaries" in problems[0].message, problems
    assert list_views(Store(root)) == []  # marked rejected: readers skip it
    Store(root).compact()
    assert equal(Store(root).runs(), want)
    assert view_problems(root) == []


def test_a_version_3_view_keeps_its_summaries_in_the_main_record(tmp_path):
    root = str(tmp_path)
    store, view = compacted_messy_root(root)
    want = reference_runs(store)

    def version_3(metadata):
        main = json.loads(metadata.pop(VIEW_METADATA))
        main["runs"].update(json.loads(metadata.pop(VIEW_SUMMARY)))
        main["version"] = 3
        del metadata[VIEW_SUMMARY_DIGEST]
        text = json.dumps(main).encode()
        return {**metadata, VIEW_METADATA: text, VIEW_DIGEST: hashlib.sha256(text).hexdigest().encode()}

    rewrite_footer(view, version_3)
    fresh = Store(root)
    assert equal(fresh.runs(), want)
    (file,) = fresh._index.view().files
    assert file.path == view and file.summaries is not None  # read from the view, not folded
    assert view_problems(root) == []

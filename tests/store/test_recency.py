"""The one rule of which record wins (``theseus.store.recency``): every form picks the same record."""

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theseus.store import latest as latest_entries
from theseus.store import recency
from theseus.store.reader import latest_value

# records of a few groups: small stamp and writer ranges force ties on the stamp, broken by the writer;
# (stamp, writer) names one record (a writer's stamps strictly increase), so no two records share both
records = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from(["w0", "w1", "w10", "w2", "x"])),
                   min_size=1, max_size=40, unique_by=lambda r: (r[1], r[2]))


def expected(rows: list[tuple[int, int, str, float]]) -> dict[int, float]:
    """Per group, the value of the record with the highest (stamp, writer), by Python's tuple order."""
    best: dict[int, tuple] = {}
    for group, stamp, writer, value in rows:
        if group not in best or (stamp, writer) > best[group][:2]:
            best[group] = (stamp, writer, value)
    return {group: record[2] for group, record in best.items()}


@settings(max_examples=200, deadline=None)
@given(found=records)
def test_every_form_picks_the_same_record(found):
    rows = [(group, stamp, writer, float(i)) for i, (group, stamp, writer) in enumerate(found)]
    want = expected(rows)
    frame = pl.DataFrame(rows, schema={"seq": pl.Int64, "stamp": pl.Int64, "writer": pl.String, "float": pl.Float64},
                         orient="row")
    groups, stamps, values = frame["seq"].to_numpy(), frame["stamp"].to_numpy(), frame["float"].to_numpy()

    polars_rows = recency.latest_rows(frame.lazy(), ["seq"]).collect()
    assert dict(polars_rows.select("seq", "float").iter_rows()) == want

    in_agg = frame.group_by("seq").agg(recency.latest_of(pl.col("float")))
    assert dict(in_agg.iter_rows()) == want

    frame_with_key = frame.with_columns(key=pl.lit("k"), int=pl.lit(None, pl.Int64))
    assert dict(frame_with_key.group_by("seq").agg(latest_value("k", "float")).iter_rows()) == want

    for writers in (frame["writer"].to_numpy(), pa.array(frame["writer"].to_list()), frame["writer"]):
        winners = recency.latest_per_group(groups, stamps, writers)
        assert dict(zip(groups[winners].tolist(), values[winners].tolist())) == want
        for group, value in want.items():
            mine = np.flatnonzero(groups == group)
            picked = recency.latest_index(stamps[mine], writers[mine] if not isinstance(writers, pa.Array)
                                          else writers.take(pa.array(mine)))
            assert values[mine][picked] == value

    for group, value in want.items():
        assert recency.latest_row(frame.filter(pl.col("seq") == group))["float"] == value
        record = None
        for g, stamp, writer, v in rows:
            if g == group:
                record = recency.later(record, (v, stamp, writer))
        assert record[0] == value

    # the array form a block keeps already sorted: the last row of each group
    ordered = frame.sort("seq", "stamp", "writer")
    keep = recency.last_of_each(ordered["seq"].to_numpy())
    assert dict(ordered.filter(pl.Series(keep)).select("seq", "float").iter_rows()) == want


@settings(max_examples=100, deadline=None)
@given(found=records)
def test_a_segments_latest_entry_follows_the_rule(found):
    """The footers' latest entries (``latest.of_table``) pick the record the rule picks."""
    rows = sorted((stamp, writer, float(i)) for i, (_, stamp, writer) in enumerate(found))
    table = pa.table({"seq": [0] * len(rows), "stamp": [r[0] for r in rows], "writer": [r[1] for r in rows],
                      "float": [r[2] for r in rows], "int": pa.nulls(len(rows), pa.int64()),
                      "bool": pa.nulls(len(rows), pa.bool_()), "str": pa.nulls(len(rows), pa.string())})
    entry = latest_entries.of_table(table, {"a": [0, len(rows), 0, 0, 1, ["float"]]})["a"]
    assert (entry[0], entry[1], entry[4]) == max(rows)


def test_a_tie_on_the_stamp_goes_to_the_highest_writer_in_every_form():
    frame = pl.DataFrame({"seq": [0, 0, 0], "stamp": [7, 7, 3], "writer": ["b", "a", "z"], "float": [1.0, 2.0, 3.0]})
    assert recency.latest_rows(frame, ["seq"])["float"].to_list() == [1.0]
    assert recency.latest_index(frame["stamp"].to_numpy(), frame["writer"].to_numpy()) == 0
    assert recency.latest_per_group(frame["seq"].to_numpy(), frame["stamp"].to_numpy(),
                                    pa.array(["b", "a", "z"])).tolist() == [0]
    assert recency.later((2.0, 7, "a"), (1.0, 7, "b")) == (1.0, 7, "b")


@pytest.mark.parametrize("stamps", [np.array([], np.int64)])
def test_no_records_is_an_error_not_a_winner(stamps):
    with pytest.raises(ValueError):
        recency.latest_index(stamps, [])

"""Property tests: the fold is order-independent, idempotent and picks the latest non-null value."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from theseus.store import Node, Store

values = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(-(2**40), 2**40))
batches = st.lists(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), values), min_size=1, max_size=6), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, compact=st.integers(-1, 5))
def test_fold_is_latest_value_per_key(tmp_path_factory, batches, compact):
    """Compaction (which writes the view) after ``compact`` batches; later batches fold on top of it."""
    root = tmp_path_factory.mktemp("fold")
    store = Store(root)
    base = Node.start("prop")
    nodes = [base]
    for _ in range(3):
        nodes.append(nodes[-1].next())
    expected: dict[tuple[int, str], float] = {}
    for i, batch in enumerate(batches):  # each batch is one writer, one segment, written after the previous
        if i == compact:
            store.compact()
        with store.writer() as w:
            for seq, key, value in batch:
                w.write(nodes[seq], {key: value})
                expected[(seq, key)] = float(value)
    if compact >= len(batches):
        store.compact()
    rows = store.find().nonce(base.nonce).frame().collect()
    got = {}
    for row in rows.iter_rows(named=True):
        for key in "abc":
            if key in row and row[key] is not None:
                got[(row["seq"], key)] = row[key]
    assert got == expected

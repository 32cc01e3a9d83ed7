"""Property tests: the fold is order-independent, idempotent and picks the latest non-null value."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from theseus.store import Node, Store
from theseus.store.cursor import UnknownKey

values = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(-(2**40), 2**40))
batches = st.lists(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), values), min_size=1, max_size=6),
    min_size=1, max_size=5)


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


runs_plan = st.lists(  # per run: batches of (seq, key, value); each batch is one writer (one segment)
    st.lists(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", "c"]), values), min_size=1, max_size=5),
             min_size=1, max_size=3),
    min_size=1, max_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=runs_plan, compact=st.booleans(), late=st.booleans(),
       keys=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True))
def test_plain_select_equals_the_general_plan(tmp_path_factory, plan, compact, late, keys):
    """A plain select(keys) (answered from the folds' columns when every run is read from the log)
    returns what the general plan does (frame(keys), which keeps node identity), and the fold
    written: over one run and over all runs, before and after compaction, with newer segments on top."""
    store = Store(tmp_path_factory.mktemp("select"))
    starts = [Node.start(f"sel{r}") for r in range(len(plan))]
    expected: dict[tuple[str, int], dict] = {}

    def write(run: int, batch: list) -> None:
        with store.writer() as w:
            for seq, key, value in batch:
                node = starts[run]
                for _ in range(seq):
                    node = node.next()
                w.write(node, {key: value})
                expected.setdefault((starts[run].nonce, seq), {})[key] = float(value)

    for run, batches in enumerate(plan):
        for batch in batches:
            write(run, batch)
    if compact:
        store.compact()
    if late:  # newer segments over the view
        write(0, plan[0][0])
    cursors = [store.find(), *(store.find().nonce(s.nonce) for s in starts)]
    for cursor in cursors:
        logged = {k for (nonce, _), row in expected.items() if cursor.nonce_glob in ("*", nonce) for k in row}
        if not set(keys) <= logged:  # a key no run of the scope logged is an error on both paths
            for ask in (cursor.select, cursor.frame):
                with pytest.raises(UnknownKey):
                    ask(keys=keys)
            continue
        got = cursor.select(keys=keys)
        general = cursor.frame(keys=keys).collect()
        assert got == general.select(keys).to_dicts()
        assert cursor.columns(keys=keys) == {k: [r[k] for r in got] for k in keys}
        assert cursor.select(keys=keys + keys) == got  # a key asked twice is one column, on either path
        assert cursor.has(keys[0]).select(keys=keys) == [r for r in got if r[keys[0]] is not None]  # the plan's path
        # the nodes holding one of the keys, in (name, nonce, seq) order
        want = sorted(((name, nonce, seq), {k: row.get(k) for k in keys})
                      for (nonce, seq), row in expected.items()
                      for name in [next(s.name for s in starts if s.nonce == nonce)]
                      if any(k in row for k in keys) and (cursor.nonce_glob in ("*", nonce)))
        assert got == [row for _, row in want]

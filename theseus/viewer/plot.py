"""Plot runs' metrics: one line per (run, key) against ``seq`` or another logged key.

Drawn with matplotlib's Agg canvas on a ``Figure`` of its own (no pyplot, no display,
no global state), saved as PNG when ``out`` is given.

>>> import tempfile, os
>>> from theseus.store import Node, Store
>>> root = tempfile.mkdtemp()
>>> n = Node.start("doc")
>>> with Store(root).writer() as w:
...     for k in range(5):
...         w.write(n, {"train/loss": 3.0 - 0.5 * k, "train/tokens": 64 * k}); n = n.next()
>>> fig = plot(root, [n.nonce], ["train/loss"], x="train/tokens", out=os.path.join(root, "loss.png"))
>>> [len(line.get_xdata()) for line in fig.axes[0].get_lines()]
[5]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import fsspec
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from theseus.errors import BadInput
from theseus.store import EmptyResult, Store
from theseus.store.node import check_nonce

SEQ = "seq"  # the node's position in its lineage: the step, for a run that did not branch


def series(store: Store | str, nonce: str, key: str, x: str = SEQ) -> tuple[list[float], list[float]]:
    """``(xs, ys)`` of ``key`` in run ``nonce``, at the nodes where both ``key`` and ``x`` are logged.

    An unknown nonce is an EmptyResult; a key the run never logged is an ``UnknownKey``
    naming close matches.

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store = Store(tempfile.mkdtemp())
    >>> n = Node.start("doc")
    >>> with store.writer() as w:
    ...     w.write(n, {"train/loss": 2.0}); w.write(n.next(), {"train/loss": 1.5})
    >>> series(store, n.nonce, "train/loss")
    ([0.0, 1.0], [2.0, 1.5])
    >>> series(store, n.nonce, "train/los")
    Traceback (most recent call last):
    ...
    theseus.store.cursor.UnknownKey: no run in this query has logged key 'train/los'; did you mean 'train/loss'? ...
    """
    store = store if isinstance(store, Store) else Store(store)
    _run_name(store, nonce)  # a clear error for a malformed or unknown nonce
    return _series(store, nonce, key, x)


def _series(store: Store, nonce: str, key: str, x: str) -> tuple[list[float], list[float]]:
    """`series` of a nonce already checked."""
    cursor = store.find().nonce(nonce).has(key)
    if x != SEQ:
        cursor = cursor.has(x)
    frame = cursor.frame().collect().sort(x)
    return [float(v) for v in frame[x]], [float(v) for v in frame[key]]


def plot(store: Store | str, nonces: Sequence[str], keys: Sequence[str], x: str = SEQ,
         out: str | os.PathLike | None = None, title: str | None = None) -> Figure:
    """A figure with one line per (run, key), labelled ``run:nonce key`` (a colour per run, a
    line style per key); saved as PNG to ``out`` if given.

    ``x`` is ``"seq"`` (the node's seq) or a logged key such as ``train/tokens``.
    ``out`` may be a local path or an fsspec URL. Returns the matplotlib ``Figure``
    (``fig.axes[0].get_lines()`` holds the plotted data).

    >>> import tempfile
    >>> from theseus.store import Node
    >>> store = Store(tempfile.mkdtemp())
    >>> a, b = Node.start("a"), Node.start("b")
    >>> with store.writer() as w:
    ...     for n in (a, b):
    ...         w.write(n, {"train/loss": 2.0}); w.write(n.next(), {"train/loss": 1.0})
    >>> [l.get_label() for l in plot(store, [a.nonce, b.nonce],
    ...                              ["train/loss"]).axes[0].get_lines()]  # doctest: +ELLIPSIS
    ['a:... train/loss', 'b:... train/loss']
    """
    store = store if isinstance(store, Store) else Store(store)
    nonces, keys = list(dict.fromkeys(nonces)), list(dict.fromkeys(keys))
    if not nonces or not keys:
        raise BadInput(f"plot needs at least one run nonce and one key, got nonces={nonces} keys={keys}")
    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    styles = ["-", "--", ":", "-."]
    for i, nonce in enumerate(nonces):  # a colour per run, a line style per key
        name = _run_name(store, nonce)
        for j, key in enumerate(keys):
            xs, ys = _series(store, nonce, key, x)
            ax.plot(xs, ys, color=f"C{i % 10}", linestyle=styles[j % len(styles)],
                    marker="." if len(xs) < 50 else None, label=f"{name}:{nonce} {key}")
    ax.set_xlabel(x)
    ax.set_ylabel(keys[0] if len(keys) == 1 else "value")
    ax.set_title(title or f"{', '.join(keys)} in {store.root}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    if out is not None:
        try:
            opened = fsspec.open(os.fspath(out), "wb")
        except ValueError as e:  # fsspec's answer to an unknown protocol in the path the caller gave
            raise BadInput(f"cannot write {out}: {e}") from None
        with opened as f:
            fig.savefig(f, format="png")
    return fig


def _run_name(store: Store, nonce: str) -> str:
    """The last part of the run's name (``train-gpt`` of ``general.default.train-gpt``)."""
    check_nonce(nonce)
    first = store.find().nonce(nonce).limit(1).all()
    if not first:
        raise EmptyResult(f"no run with nonce {nonce!r} in {store.root} (`theseus ls {store.root}` lists the runs)")
    return first[0].run

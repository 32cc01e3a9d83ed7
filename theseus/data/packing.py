"""Packing: several conversations per row, told apart by segment ids, with positions restarting per segment.

The plan is a pure function of the conversations in data order: first fit over a window
of open rows. A conversation goes into the first open row (oldest first) with room for it,
else into a new row; when more than ``window`` rows are open the oldest is finished, so
memory stays bounded and rows come out in the order they were opened. A packed dataset
stores the plan as its own ``<split>_segments.npy``: per token, 0 for padding and 1, 2...
for the row's conversations in order.

A batch of a packed dataset carries ``segment_ids`` and ``positions`` (int32, per token of
``x``) next to ``x``, ``y``, ``padding_mask``; a target that is the first token of the next
conversation (its segment differs from its input's) is out of the loss.
"""

from __future__ import annotations

import numpy as np

from theseus.errors import BadInput

SEGMENT_DTYPE = np.dtype("<i4")
WINDOW = 64


class Packer:
    """First-fit packing of (tokens, mask) conversations into rows of ``width`` tokens padded with ``eot``.

    ``add`` returns the rows it finished (the oldest open one, when too many are open);
    ``finish`` the rest. Each finished row is ``(tokens, mask, segments)``.

    >>> p = Packer(width=6, eot=0)
    >>> rows = p.add(np.array([5, 6, 7]), np.array([0, 1, 1], bool)) + p.add(np.array([8, 9]), np.ones(2, bool))
    >>> rows += p.add(np.array([1, 2, 3]), np.ones(3, bool)) + p.finish()
    >>> [r[0].tolist() for r in rows], [r[2].tolist() for r in rows]
    ([[5, 6, 7, 8, 9, 0], [1, 2, 3, 0, 0, 0]], [[1, 1, 1, 2, 2, 0], [1, 1, 1, 0, 0, 0]])
    """

    def __init__(self, width: int, eot: int, window: int = WINDOW):
        if width < 2 or window < 1:
            raise BadInput(f"packing needs width >= 2 and window >= 1, got {width} and {window}")
        self.width, self.eot, self.window = int(width), int(eot), int(window)
        self.open: list[list[tuple[np.ndarray, np.ndarray]]] = []
        self.used: list[int] = []

    def add(self, tokens: np.ndarray, mask: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Place one conversation (at most ``width`` tokens); the rows this finishes."""
        n = len(tokens)
        if not 0 < n <= self.width:
            raise BadInput(f"a packed conversation needs 1..{self.width} tokens, got {n}")
        for i, used in enumerate(self.used):
            if used + n <= self.width:
                self.open[i].append((tokens, mask))
                self.used[i] += n
                return []
        self.open.append([(tokens, mask)])
        self.used.append(n)
        if len(self.open) > self.window:
            self.used.pop(0)
            return [self._row(self.open.pop(0))]
        return []

    def finish(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The rows still open, in the order they were opened."""
        rows = [self._row(pieces) for pieces in self.open]
        self.open, self.used = [], []
        return rows

    def _row(self, pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tokens = np.full(self.width, self.eot, dtype=np.uint32)
        mask = np.zeros(self.width, dtype=bool)
        segments = np.zeros(self.width, dtype=SEGMENT_DTYPE)
        at = 0
        for s, (t, m) in enumerate(pieces, 1):
            tokens[at:at + len(t)], mask[at:at + len(t)], segments[at:at + len(t)] = t, m, s
            at += len(t)
        return tokens, mask, segments


def positions(segments: np.ndarray) -> np.ndarray:
    """Each token's position inside its segment (a run of equal ids along the last axis), as int32.

    >>> positions(np.array([[1, 1, 1, 2, 2, 0, 0]])).tolist()
    [[0, 1, 2, 0, 1, 0, 1]]
    """
    segments = np.asarray(segments)
    index = np.broadcast_to(np.arange(segments.shape[-1]), segments.shape)
    starts = np.ones(segments.shape, dtype=bool)
    starts[..., 1:] = segments[..., 1:] != segments[..., :-1]
    return (index - np.maximum.accumulate(np.where(starts, index, 0), axis=-1)).astype(np.int32)


def packed_batch(tokens: np.ndarray, mask: np.ndarray, segments: np.ndarray, block_size: int) -> dict[str, np.ndarray]:
    """The batch of rows ``[R, >= block_size + 1]`` of a packed dataset: ``x``, ``y``, ``padding_mask``,
    ``segment_ids`` and ``positions`` of ``block_size`` tokens; a target of another segment than its input's
    is out of the loss.

    >>> b = packed_batch(np.array([[5, 6, 7, 8, 9, 0]]), np.array([[0, 1, 1, 1, 1, 0]], bool),
    ...                  np.array([[1, 1, 1, 2, 2, 0]]), 5)
    >>> b["padding_mask"].tolist(), b["positions"].tolist()
    ([[True, True, False, True, False]], [[0, 1, 2, 0, 1]])
    """
    T = block_size
    segments = np.asarray(segments)
    same = segments[:, 1:T + 1] == segments[:, :T]
    return {
        "x": np.asarray(tokens[:, :T]).astype(np.int32),
        "y": np.asarray(tokens[:, 1:T + 1]).astype(np.int32),
        "padding_mask": np.asarray(mask[:, 1:T + 1]) & same & (segments[:, :T] > 0),
        "segment_ids": segments[:, :T].astype(np.int32),
        "positions": positions(segments[:, :T]),
    }

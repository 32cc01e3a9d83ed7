"""The pictures of the analyses: matplotlib figures on the Agg canvas (no pyplot, no display, no global
state), saved as PNG bytes; and a mosaic that tiles many small maps into one image.

>>> figure = new_figure(2, 2)
>>> axes = figure.add_subplot()
>>> _ = axes.plot([0, 1], [1, 0])
>>> png(figure)[:8]
b'\\x89PNG\\r\\n\\x1a\\n'
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["mosaic", "new_figure", "png"]

DPI = 100


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches on its own Agg canvas.

    >>> new_figure(3, 2).get_size_inches().tolist()
    [3.0, 2.0]
    """
    # lazily: matplotlib loads when a picture is drawn, not whenever the parts registry is read
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes.

    >>> png(new_figure(1, 1)).startswith(b"\\x89PNG")
    True
    """
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def mosaic(maps: np.ndarray, gap: int = 1) -> np.ndarray:
    """Maps ``[R, C, H, W]`` tiled into one ``[R*(H+gap)-gap, C*(W+gap)-gap]`` image, NaN in the gaps.

    >>> mosaic(np.ones((2, 3, 4, 4))).shape
    (9, 14)
    """
    maps = np.asarray(maps, np.float32)
    rows, cols, height, width = maps.shape
    out = np.full((rows * (height + gap) - gap, cols * (width + gap) - gap), np.nan, np.float32)
    for r in range(rows):
        top = r * (height + gap)
        for c in range(cols):
            left = c * (width + gap)
            out[top:top + height, left:left + width] = maps[r, c]
    return out

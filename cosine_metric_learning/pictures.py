"""Ranked-retrieval pictures: queries and their nearest gallery entries.

``--mode=test --rank_image`` writes one for test queries; the evaluator
draws one for fixed validation probes at every checkpoint (TensorBoard's
Images tab), so the model's progress can be seen, not only read.
"""

import numpy as np
from PIL import Image, ImageDraw

TILE = (64, 128)  # width, height of each image in the picture
BORDER = 4
MATCH, NON_MATCH = (0, 170, 0), (220, 0, 0)


def fixed_sample(count, size, seed=0):
    """``size`` of ``range(count)`` (all if fewer), sorted, the same for
    the same arguments."""
    chosen = np.random.RandomState(seed).choice(count, min(size, count),
                                                replace=False)
    return np.sort(chosen)


def nearest(distances, excluded, top):
    """Indices of the ``top`` smallest ``distances`` that are not
    ``excluded``; ties keep index order."""
    order = np.argsort(distances, kind="stable")
    return [g for g in order if not excluded[g]][:top]


def ranked_retrieval(rows, tile=TILE, border=BORDER):
    """A picture with one row per query: the query's image, then its
    ranked gallery images framed green (a match) or red.

    Parameters
    ----------
    rows : list of (str, list of (str, bool))
        Each query's image file and its ranked gallery files with whether
        each shows the query's identity.

    Returns
    -------
    PIL.Image.Image
    """
    top = max((len(ranked) for _, ranked in rows), default=0)
    width, height = tile
    cell_w, cell_h = width + 2 * border, height + 2 * border
    canvas = Image.new("RGB", (cell_w * (top + 1) + border,
                               cell_h * len(rows)), "white")
    draw = ImageDraw.Draw(canvas)

    def paste(filename, col, row, color):
        x, y = col * cell_w + (border if col else 0), row * cell_h
        if color:
            draw.rectangle([x, y, x + cell_w - 1, y + cell_h - 1], fill=color)
        with Image.open(filename) as image:
            canvas.paste(image.convert("RGB").resize(tile),
                         (x + border, y + border))

    for row, (query, ranked) in enumerate(rows):
        paste(query, 0, row, None)
        for col, (filename, match) in enumerate(ranked, start=1):
            paste(filename, col, row, MATCH if match else NON_MATCH)
    return canvas

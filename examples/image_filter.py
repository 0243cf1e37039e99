"""Sobel edge detection on a real photograph (matplotlib's sample image of Grace Hopper).

Each thread computes the horizontal and vertical Sobel gradients of its pixel from the 3x3
neighbourhood (edges clamped to the border) and writes the gradient magnitude. The result is
checked against a NumPy reference in float64 and saved as a PNG.
Sobel operator: I. Sobel and G. Feldman, "A 3x3 isotropic gradient operator" (1968).

The photograph comes from matplotlib's package data and is decoded with Pillow: the ``demo``
extra (``pip install 'fearless[demo]'``), not a dependency of fearless itself. Without them the
example filters a test pattern generated here instead and says so in its notes (and writes no
PNG without Pillow).
"""
from __future__ import annotations

import os

import numpy as np

import fearless as fl
from fearless import f32

try:
    from examples._common import Result, check, compiling_ahead, timed
except ImportError:
    from fearless.examples._common import Result, check, compiling_ahead, timed


@fl.func
def pixel(img, r, c):
    rows, cols = img.shape
    return img[min(max(r, 0), rows - 1), min(max(c, 0), cols - 1)]


@fl.kernel
def sobel(img: fl.Array[f32, 2], out: fl.DisjointArray[f32, 2]):
    r, c = fl.thread.index_2d()
    rows, cols = out.shape
    if r < rows and c < cols:
        y, x = r + 0, c + 0  # plain integers for the neighbourhood arithmetic
        gx = (pixel(img, y - 1, x + 1) + 2 * pixel(img, y, x + 1) + pixel(img, y + 1, x + 1)
              - pixel(img, y - 1, x - 1) - 2 * pixel(img, y, x - 1) - pixel(img, y + 1, x - 1))
        gy = (pixel(img, y + 1, x - 1) + 2 * pixel(img, y + 1, x) + pixel(img, y + 1, x + 1)
              - pixel(img, y - 1, x - 1) - 2 * pixel(img, y - 1, x) - pixel(img, y - 1, x + 1))
        out[r, c] = (gx * gx + gy * gy) ** 0.5


MISSING = "no photograph without the demo extra (pip install 'fearless[demo]'): a test pattern"


def photograph() -> np.ndarray:
    """Grace Hopper's portrait from matplotlib's package data, grayscale f32 in [0, 1] (600 x
    512). Raises ImportError naming the ``demo`` extra without matplotlib or Pillow."""
    try:
        from matplotlib import cbook
        from PIL import Image
    except ImportError as exc:
        raise ImportError(f"the photograph needs matplotlib and Pillow ({exc}): "
                          f"pip install 'fearless[demo]'") from exc
    with Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as photo:
        return np.asarray(photo.convert("L"), np.float32) / 255.0


def picture() -> tuple[np.ndarray, str | None]:
    """What the examples filter: ``(photograph(), None)``, or without the ``demo`` extra
    ``(generated_pattern(), MISSING)``."""
    try:
        return photograph(), None
    except ImportError:
        return generated_pattern(), MISSING


def generated_pattern(rows: int = 600, cols: int = 512) -> np.ndarray:
    """A grayscale f32 image in [0, 1] with edges in every direction: concentric rings, a
    bright square and a left-to-right ramp (deterministic; no data files)."""
    r, c = np.mgrid[0:rows, 0:cols].astype(np.float64)
    rings = 0.5 + 0.5 * np.sin(np.hypot(r - rows / 2, c - cols / 2) / 6.0)
    square = ((abs(r - rows / 4) < rows / 8) & (abs(c - cols / 4) < cols / 8)).astype(np.float64)
    return (0.45 * rings + 0.35 * square + 0.2 * c / cols).astype(np.float32)


def reference(img: np.ndarray) -> np.ndarray:
    p = np.pad(img.astype(np.float64), 1, mode="edge")
    gx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    gy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    return np.sqrt(gx * gx + gy * gy)


def run(out_png: str | None = "sobel_grace_hopper.png", repeat: int = 10) -> Result:
    img_h, missing = picture()
    rows, cols = img_h.shape
    img = fl.asarray(img_h)
    out = fl.full((rows, cols), np.nan, f32)
    launch = sobel.prepare((rows, cols))
    first, steady = timed(lambda: sobel[launch](img, out), repeat)
    edges = out.numpy()
    err = check("image_filter", edges, reference(img_h), rtol=1e-4, atol=1e-5)
    notes = [missing] if missing else []
    if out_png and not compiling_ahead():  # under `fearless compile` nothing ran
        try:
            from PIL import Image
        except ImportError:
            notes.append("no PNG written: it needs Pillow (the demo extra)")
        else:
            scaled = np.clip(edges / max(float(edges.max()), 1e-12) * 255.0, 0,
                             255).astype(np.uint8)
            Image.fromarray(scaled).save(out_png)
            notes.append(f"wrote {os.path.abspath(out_png)}")
    return Result("image_filter", fl.current_backend(),
                  f"{rows}x{cols} {'pattern' if missing else 'photo'}", first, steady,
                  8 * rows * cols, err, notes)


if __name__ == "__main__":
    print(run())

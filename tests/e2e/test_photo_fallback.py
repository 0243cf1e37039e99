"""The photograph is the ``demo`` extra's, not a dependency: without matplotlib (or Pillow) the
examples that use it still run, on a generated pattern, and say what is missing.

``sys.modules[name] = None`` makes ``import name`` raise ImportError, as on an install without
the extra.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from examples import histogram, image_filter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def without(monkeypatch):
    def block(*names):
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)
    return block


def test_the_image_filter_runs_on_a_generated_pattern_without_matplotlib(without, tmp_path):
    without("matplotlib")
    with pytest.raises(ImportError, match=r"pip install 'fearless\[demo\]'"):
        image_filter.photograph()
    result = image_filter.run(out_png=str(tmp_path / "edges.png"))
    assert 0 <= result.error_ratio <= 1  # checked against NumPy, as with the photograph
    assert result.size == "600x512 pattern"
    assert result.notes[0] == image_filter.MISSING and "fearless[demo]" in result.notes[0]
    assert (tmp_path / "edges.png").is_file()  # Pillow is still there to write it


def test_without_pillow_no_png_is_written_and_the_note_says_why(without, tmp_path):
    without("matplotlib", "PIL", "PIL.Image")
    result = image_filter.run(out_png=str(tmp_path / "edges.png"))
    assert result.notes == [image_filter.MISSING, "no PNG written: it needs Pillow (the demo extra)"]
    assert not (tmp_path / "edges.png").exists()


def test_the_histogram_counts_the_pattern_without_matplotlib(without):
    without("matplotlib")
    result = histogram.run(repeat=1)
    assert result.error_ratio == 0 and result.notes == [image_filter.MISSING]


def test_the_generated_pattern_has_edges_everywhere():
    img = image_filter.generated_pattern()
    assert img.shape == (600, 512) and img.dtype == np.float32
    assert 0 <= img.min() and img.max() <= 1
    edges = image_filter.reference(img)
    assert (edges > 0.1).mean() > 0.2  # rings: most of the picture is edges
    assert len(np.unique(np.round(img * 255).astype(np.uint8))) > 200  # a full histogram


def test_the_photograph_is_the_demo_extras_not_a_dependency():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = config["project"]
    assert not any(d.startswith(("matplotlib", "pillow")) for d in project["dependencies"])
    assert {"matplotlib", "pillow"} <= {d.split(">")[0].split("=")[0]
                                        for d in project["optional-dependencies"]["demo"]}


def test_readme_and_ci_install_the_same_extras_and_they_exist():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = set(config["project"]["optional-dependencies"])
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):]
    first = next(line for line in quick.splitlines() if "pip install" in line)
    ci = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines()
              if line.startswith("pip install"))
    wanted = [s[s.index("'.[") + 3:s.index("]'")].split(",") for s in (first, ci)]
    assert wanted[0] == wanted[1], (first, ci)
    assert {"test", "tile", "demo"} <= set(wanted[0]) <= extras
    assert "fearless demo" in first


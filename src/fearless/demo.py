"""``fearless demo``: run every example on the GPU when usable, else on the CPU backend.

Each example checks itself against NumPy; the demo prints the backend it used and a table of
first-call time (includes compiling), steady time per launch, effective bandwidth and the worst
error as a fraction of its allowed bound, then where it wrote the image filter's picture. Exit
status 1 when any example failed. A ``BackendError`` (``FEARLESS_BACKEND=cuda`` without a usable
GPU, a driver that fails) stops the demo at once: every further example would fail the same way.
"""
from __future__ import annotations

import importlib
import tempfile
import traceback
from pathlib import Path

from fearless.errors import BackendError

# A folder named like an importable package (``fearless``) in the temp dir would shadow the real
# package for every script run from there; this name cannot be imported.
DEMO_DIR = "fearless-demo"


def default_png() -> Path:
    """Where the image-filter example's picture goes unless ``--png`` says otherwise."""
    return Path(tempfile.gettempdir()) / DEMO_DIR / "sobel_grace_hopper.png"


def run(png: str | Path | None = None) -> int:
    """Run the examples; ``png``: where the image filter writes its result (default
    ``default_png()``). Returns the exit status; raises BackendError when the backend asked for
    cannot run kernels."""
    import fearless as fl
    from fearless.examples import NAMES
    from fearless.runtime.device import cuda_probe

    backend = fl.current_backend()
    ok, detail = cuda_probe()
    if backend == "cuda" and not ok:
        raise BackendError(f"FEARLESS_BACKEND=cuda asks for the GPU, but {detail}",
                           help="unset FEARLESS_BACKEND (or set it to cpu) to run the demo on "
                                "the CPU backend; `fearless doctor` says what is missing")
    if backend == "cuda":
        print(f"fearless demo on the GPU: {detail}")
    else:
        why = "FEARLESS_BACKEND/set_backend chose it" if ok else detail
        print(f"fearless demo on the CPU backend ({why})")
    png = Path(png) if png is not None else default_png()
    png.parent.mkdir(parents=True, exist_ok=True)
    print(f"{'example':<16} {'size':<24} {'first ms':>9} {'steady ms':>10} {'GB/s':>8} "
          f"{'err/bound':>9}  result")
    failures, picture = 0, None
    for name in NAMES:
        module = importlib.import_module(f"fearless.examples.{name}")
        try:
            r = module.run(str(png)) if name == "image_filter" else module.run()
        except BackendError:
            raise  # the backend itself failed: every other example would fail the same way
        except Exception as exc:  # report every example, then fail at the end
            failures += 1
            print(f"{name:<16} FAILED: {type(exc).__name__}: {exc}")
            traceback.print_exc()
            continue
        print(f"{r.name:<16} {r.size:<24} {r.first_ms:9.2f} {r.steady_ms:10.3f} {r.gbps:8.1f} "
              f"{r.error_ratio:9.3f}  ok vs NumPy" + "".join(f"; {n}" for n in r.notes))
        if name == "image_filter" and png.exists():
            picture = png
    if picture is not None:
        print(f"the image filter's edges of the photograph: {picture}")
    return 1 if failures else 0

"""The one place FEARLESS_* environment variables are read.

``Config.from_env()`` runs once at import of the runtime; everything else receives the Config (or
reads ``fearless.config.CONFIG``) rather than looking at ``os.environ`` itself.

Variables:
    FEARLESS_BACKEND    ``cpu`` or ``cuda``; unset picks cuda when a usable GPU is present.
    FEARLESS_CACHE_DIR  JIT cache directory; default ``$XDG_CACHE_HOME/fearless`` (``~/.cache``).
    FEARLESS_CACHE      ``0`` disables the on-disk JIT cache (the in-memory one stays).
    FEARLESS_DUMP       comma list of compile stages to print to stderr as each kernel compiles
                        (``ir,passes,ptx``; the names of ``fearless inspect --stage``, DUMP_STAGES).
                        A compile the disk cache answers prints nothing: add FEARLESS_CACHE=0.
    FEARLESS_RACECHECK  ``0`` turns off the cpu backend's race detector, which is on by default:
                        it watches shared memory, UnsafeSlice and atomic arrays and raises
                        RaceError. The cpu backend is where kernels are developed, so races
                        must show there. Its cost, measured on the examples (steady time per
                        launch, best of 3, off -> on): nothing measurable for kernels without
                        such arrays; block_reduce 1.11x, sgemm 1.12x, row_softmax 1.33x,
                        prefix_sum 1.33x, hgemm 1.59x, transpose 2.9x (every element passes
                        through a shared tile); the histogram's atomics 1.0x.
    FEARLESS_TRACEBACK  ``1`` keeps fearless's own frames in the tracebacks of user errors
                        (``tracebacks.py`` removes them by default).
    FEARLESS_PROGRESS   ``0`` silences the line on stderr that a compile taking more than a
                        second prints (``fearless: compiling kernel 'k' ... done in 6.2 s``).
    FEARLESS_CROSS_COMPILE  comma list of GPU archs (``sm_80,sm_90``): every kernel specialisation
                        the cpu backend compiles is also compiled to a cubin for each, and a
                        failure raises at that launch (``runtime/ahead.py``; CI sets it, no
                        GPU needed). Default: none.
    FEARLESS_PDL        ``0`` launches tile kernels without programmatic dependent launch (they
                        are compiled for it on sm_90 and later either way: each waits for the
                        kernel before it ahead of its first memory access; see
                        ``backends/tileir/lower.py``'s ``uses_pdl``). For measuring it.
    FEARLESS_STATS      ``1`` starts ``fl.stats`` counting when fearless is imported
                        (``runtime/stats.py``). Default off.
    FEARLESS_PROFILE    ``1`` also times every eager launch (``fl.profile()``: CUDA events on
                        the GPU, the wall clock on the cpu backend); implies FEARLESS_STATS.
    FEARLESS_AUTOTUNE   ``0``: autotuned kernels run the cached winner or the first config,
                        never tuning (``fearless/tile/tuning.py``).
    FEARLESS_NN_AUTOTUNE  ``0``: ``fearless.nn.attention`` (prefill) keeps its measured tiles
                        (``nn/attention.py``'s ``PREFILL``). Default ``1``: on the GPU it picks
                        them through ``ft.autotune``, once per power-of-two bucket of sequence
                        lengths, the measured tiles first (up to 4% faster on the H200; the
                        first call of a new dtype, head dim and causality compiles 5 configs).
    FEARLESS_AUTOTUNE_SECONDS  a bound on the seconds one tuning (one new key) may take: past it
                        the configs not yet measured are skipped and the best measured wins
                        (at least one is always measured). With ``ft.autotune(max_seconds=)``
                        the smaller bound applies. Default: none.
    FEARLESS_AUTOTUNE_PROGRESS  ``1``: a line on stderr per config measured while tuning; ``0``:
                        none, and no summary line either. Unset: the lines when stderr is a
                        terminal (and FEARLESS_PROGRESS is not ``0``), else the summary only.
    FEARLESS_TMA        ``0`` compiles tile kernels without TMA (every tile load and store
                        ``allow_tma=False``; kept apart in the caches). compute-sanitizer's
                        initcheck does not see TMA's bulk tensor stores and reports every later
                        plain read of their result as uninitialised (measured on the H200,
                        CUDA 13.0), so ``fearless sanitize --tool initcheck`` sets it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


# the compile stages of both tracks (compiler.STAGE_NAMES and TILE_STAGE_NAMES; a test keeps
# them equal): config sits below the compiler and cannot import it
DUMP_STAGES = ("ast", "types", "ir", "passes", "llvm", "ptx", "cubin", "sass", "tileir")


@dataclass(frozen=True)
class Config:
    backend: str | None
    cache_dir: Path
    disk_cache: bool
    dump: frozenset[str]
    racecheck: bool = True
    full_traceback: bool = False
    progress: bool = True
    cross_compile: tuple[str, ...] = ()
    pdl: bool = True
    tma: bool = True
    stats: bool = False
    profile: bool = False
    autotune: bool = True
    autotune_seconds: float | None = None
    autotune_progress: bool | None = None   # None: when stderr is a terminal
    nn_autotune: bool = True

    @staticmethod
    def from_env(env=None) -> "Config":
        env = os.environ if env is None else env
        backend = env.get("FEARLESS_BACKEND") or None
        if backend is not None and backend not in ("cpu", "cuda"):
            raise ValueError(f"FEARLESS_BACKEND={backend!r}: expected 'cpu' or 'cuda'")
        xdg = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache_dir = Path(env.get("FEARLESS_CACHE_DIR") or Path(xdg) / "fearless")
        dump = frozenset(s.strip() for s in env.get("FEARLESS_DUMP", "").split(",") if s.strip())
        if dump - set(DUMP_STAGES):
            raise ValueError(f"FEARLESS_DUMP={env['FEARLESS_DUMP']!r}: "
                             f"{sorted(dump - set(DUMP_STAGES))[0]!r} is not a stage; stages: "
                             f"{', '.join(DUMP_STAGES)}")
        archs = tuple(dict.fromkeys(
            a.strip() for a in env.get("FEARLESS_CROSS_COMPILE", "").split(",") if a.strip()))
        bad = [a for a in archs if not re.fullmatch(r"sm_\d+a?", a)]
        if bad:
            raise ValueError(f"FEARLESS_CROSS_COMPILE={env['FEARLESS_CROSS_COMPILE']!r}: "
                             f"{bad[0]!r} is not a GPU arch such as 'sm_90'")
        seconds = env.get("FEARLESS_AUTOTUNE_SECONDS", "").strip() or None
        if seconds is not None:
            try:
                seconds = float(seconds)
            except ValueError:
                seconds = -1.0
            if not seconds > 0 or seconds == float("inf"):
                raise ValueError(f"FEARLESS_AUTOTUNE_SECONDS={env['FEARLESS_AUTOTUNE_SECONDS']!r}:"
                                 f" expected a number of seconds > 0")
        progress = env.get("FEARLESS_AUTOTUNE_PROGRESS", "").strip()
        return Config(backend=backend, cache_dir=cache_dir,
                      disk_cache=env.get("FEARLESS_CACHE", "1") != "0", dump=dump,
                      racecheck=env.get("FEARLESS_RACECHECK", "").strip() != "0",
                      full_traceback=env.get("FEARLESS_TRACEBACK", "0") not in ("", "0"),
                      progress=env.get("FEARLESS_PROGRESS", "1") != "0", cross_compile=archs,
                      pdl=env.get("FEARLESS_PDL", "1") != "0",
                      tma=env.get("FEARLESS_TMA", "1") != "0",
                      stats=env.get("FEARLESS_STATS", "0") not in ("", "0"),
                      profile=env.get("FEARLESS_PROFILE", "0") not in ("", "0"),
                      autotune=env.get("FEARLESS_AUTOTUNE", "1") != "0",
                      autotune_seconds=seconds,
                      autotune_progress=None if not progress else progress != "0",
                      nn_autotune=env.get("FEARLESS_NN_AUTOTUNE", "1") != "0")


CONFIG = Config.from_env()

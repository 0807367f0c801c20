"""A cProfile of one command (``--profile`` or ``PA_BENCH_PROFILE``), written beside its run.

``PA_BENCH_PROFILE=1`` (or the ``--profile`` flag) writes ``<run dir>/profile.pstats``; any
other value is the file to write. Read it with ``python -m pstats FILE`` (``sort cumtime``,
``stats 30``) or snakeviz. Profiling adds some overhead to Python-heavy phases; the GPU times
that pa-bench records are taken on the device and are not affected.
"""

from __future__ import annotations

import cProfile
import os
from pathlib import Path

PROFILE_ENV = "PA_BENCH_PROFILE"
PROFILE_FILE = "profile.pstats"
_YES = ("1", "true", "yes", "on")
_NO = ("", "0", "false", "no", "off")


def profile_target(flag: bool = False) -> str | None:
    """Where the profile goes: ``PA_BENCH_PROFILE``'s value, else "1" with the flag, else None."""
    env = os.environ.get(PROFILE_ENV, "").strip()
    if env.lower() not in _NO:
        return env
    return "1" if flag else None


class RunProfile:
    """``with RunProfile(target) as prof: ...`` then ``prof.write(run_dir)``; a no-op when
    ``target`` is None."""

    def __init__(self, target: str | None):
        self.target = target
        self.profile = cProfile.Profile() if target else None

    def __enter__(self) -> "RunProfile":
        if self.profile is not None:
            self.profile.enable()
        return self

    def __exit__(self, *exc) -> None:
        if self.profile is not None:
            self.profile.disable()

    def path_for(self, run_dir: str | Path | None) -> Path | None:
        if self.target is None:
            return None
        if self.target.lower() in _YES:
            return None if run_dir is None else Path(run_dir) / PROFILE_FILE
        return Path(self.target)

    def write(self, run_dir: str | Path | None) -> Path | None:
        """Dump the profile; returns its path (None when not profiling or nowhere to put it)."""
        path = self.path_for(run_dir)
        if path is None or self.profile is None:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        self.profile.dump_stats(str(path))
        return path


__all__ = ["PROFILE_ENV", "PROFILE_FILE", "profile_target", "RunProfile"]

"""pa-bench: build, check and time int8-KV prompt-attention CUDA kernels.

The public names (docs/API.md): :func:`check` and :func:`bench` run a config's shapes x
variants and return the records as a pandas DataFrame; :func:`load_config`, :class:`Problem`
and :func:`make_problem` say what to run; :func:`session` prepares one problem's kernels for a
tool; :func:`read_run` reads a stored run.
"""

__version__ = "0.1.0"

from pa_bench.api import (  # noqa: E402 - after __version__, which modules below read
    Config,
    Launch,
    PaBenchError,
    Pins,
    Problem,
    Session,
    Shape,
    bench,
    check,
    launch_for,
    load_config,
    make_problem,
    parity_verdict,
    parse_shape,
    pins_of,
    read_run,
    session,
)

__all__ = [
    "__version__", "Config", "Launch", "PaBenchError", "Pins", "Problem", "Session", "Shape", "bench",
    "check", "launch_for", "load_config", "make_problem", "parity_verdict", "parse_shape", "pins_of", "read_run", "session",
]

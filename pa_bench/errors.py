"""Exception types whose message is shown to the user as one line (no traceback)."""


class PaBenchError(Exception):
    """An error caused by the user's input or environment; the CLI prints it on one line."""

    exit_code = 2


class ConfigError(PaBenchError):
    """A config file is missing, unreadable, or has an unknown key or a bad value."""


class ShapeError(PaBenchError):
    """A shape string does not follow the CTXxQ grammar."""


class BackendUnavailable(PaBenchError):
    """The requested backend (CuPy, a GPU, torch) is not available on this machine."""


class RunNotFound(PaBenchError):
    """A run named on the command line (report, compare, --resume) is missing or not a run."""


class EmptyRun(PaBenchError):
    """A run holds no finished row (records.csv missing or header-only): nothing to report."""


class DamagedRun(PaBenchError):
    """A run's files are damaged: meta.json missing or not JSON, records.csv cut short."""


class ResultsNotWritable(PaBenchError):
    """``--results`` cannot hold a new run directory (not creatable, not writable)."""


class SchemaError(PaBenchError):
    """A stored run's result schema is unknown (newer than this pa-bench) or a key has a bad type."""


class RunError(PaBenchError):
    """A run could not complete (result directory problems, a failed resume)."""

    exit_code = 1


class PluginError(PaBenchError):
    """A plug-in (``--plugin``, a config's ``plugins:``, an installed entry point) cannot be loaded."""

"""Plug-ins: modules that register variants (peers or kernels) without editing pa-bench.

A plug-in is a Python module that, when imported, registers what it brings:
``pa_bench.peers.register_peer(MyPeer)`` for another library's attention, or
``pa_bench.variants.register(Variant(...))`` for a CUDA kernel of one's own (an absolute
``source`` path and a ``geometry`` function). pa-bench imports it from

- an installed package's entry point in the group ``pa_bench.plugins`` (``[project.entry-points.
  "pa_bench.plugins"] mine = "mypkg.pa_plugin"`` in its pyproject.toml), at the first config load;
- a config's ``plugins:`` list, or ``--plugin MODULE`` on the command line: a module name
  (importable from ``sys.path``) or a path to a ``.py`` file.

docs/PLUGINS.md has the interface and a worked example (examples/plugin_peer.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zlib
from pathlib import Path

from pa_bench.errors import PluginError

ENTRY_POINT_GROUP = "pa_bench.plugins"

_loaded: dict[str, str] = {}          # what was asked for -> the canonical name (module or file)
_installed_done = False


def load(name: str, base_dir: str | Path | None = None) -> str:
    """Import plug-in ``name`` once (a module name, or a ``.py`` file relative to ``base_dir``) and
    return its canonical name: the module's, or the file's absolute path. One line on failure."""
    if name in _loaded:
        return _loaded[name]
    path = Path(name).expanduser()
    if path.suffix == ".py" or path.exists() or "/" in name:
        if not path.is_absolute() and base_dir is not None and not path.exists():
            path = Path(base_dir) / path
        path = path.resolve()
        canonical = str(path)
        if canonical not in _loaded.values():
            _import_file(path, name)
    else:
        canonical = name
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise PluginError(f"plug-in {name!r} cannot be imported: {exc}") from None
            except Exception as exc:
                raise PluginError(f"plug-in {name!r} failed while loading: "
                                  f"{type(exc).__name__}: {exc}") from None
    _loaded[name] = canonical
    return canonical


def _import_file(path: Path, shown: str) -> None:
    if not path.is_file():
        raise PluginError(f"plug-in {shown!r}: no such file {path}")
    module = f"pa_bench_plugin_{path.stem}_{zlib.crc32(str(path).encode()):08x}"
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plug-in {shown!r}: {path} is not a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        del sys.modules[module]
        raise PluginError(f"plug-in {shown!r} failed while loading: {type(exc).__name__}: {exc}") from None


def load_installed() -> list[str]:
    """Import every installed package's plug-in (entry point group ``pa_bench.plugins``), once;
    returns their names. A broken one is one line (PluginError) naming its entry point."""
    global _installed_done
    if _installed_done:
        return []
    _installed_done = True
    from importlib.metadata import entry_points

    names = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
        except Exception as exc:
            raise PluginError(f"installed plug-in {ep.name!r} ({ep.value}) failed while loading: "
                              f"{type(exc).__name__}: {exc}") from None
        if callable(target) and not isinstance(target, type):
            target()                      # an entry point may name a register() function
        names.append(ep.value)
    return names


def forget(name: str) -> None:
    """Forget that ``name`` was loaded, so that a later load imports it again (after its variants
    were unregistered: tests, an experiment reloaded)."""
    _loaded.pop(name, None)


def loaded() -> dict[str, str]:
    """The plug-ins loaded so far: as asked for -> canonical name."""
    return dict(_loaded)


__all__ = ["load", "load_installed", "loaded", "forget", "ENTRY_POINT_GROUP"]

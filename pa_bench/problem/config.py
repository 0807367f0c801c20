"""Load and validate a pa-bench config (``configs/*.yaml``) into a frozen :class:`Config`.

Every key is checked: an unknown key at any level, a value of the wrong type or out of range,
a missing file or a YAML syntax error is a one-line :class:`ConfigError` that names the file
and the key. ``Config.with_overrides(...)`` applies command-line overrides through the same
validation. The YAML is read with YAML 1.2 scalar rules (``0x1536`` is a string, not a hex
integer; only ``true``/``false`` are booleans; ``1e-6`` is a float) and duplicate keys are errors.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from pa_bench import resources
from pa_bench import variants as registry
from pa_bench.errors import ConfigError, ShapeError
from pa_bench.measure.settings import L2_FLUSHES, MAX_PLACEMENTS, MAX_ROUND_SAMPLES, TimingSettings, slow_spec
from pa_bench.problem.shapes import Shape, parse_shape, parse_shapes

# How the numerics model accumulates P.V (``parity.mma``): ``emulated`` follows mma.sync's measured
# accumulation (pa_bench.numerics.mma), ``rn`` rounds every add to nearest.
MMA_MODES = ("emulated", "rn")
DEFAULT_MMA = "emulated"

CONFIG_DIR = resources.CONFIG_DIR  # configs/ of the checkout, or the wheel's copy
DEFAULT_CONFIG = CONFIG_DIR / "pr2092.yaml"

LAYOUTS = ("paged", "contiguous")
DATA_KINDS = ("normal", "realistic", "npz")
OUT_DTYPES = ("float32", "float16")
HEAD_DIMS = (64, 128)


# --------------------------------------------------------------------------- dataclasses


#: How the numerics model accumulates P.V (``parity.mma``): "emulated" mirrors mma.sync's truncating
#: block FMA (pa_bench.numerics.mma), "rn" is the ideal (docs/NUMERICS.md has the evidence).

#: Every query row, as a number of sampled rows: the value of ``parity.sample_rows``,
#: ``parity.numpy_sample_rows`` and of ``--sample-rows all`` (a count is at least 1). YAML writes
#: it ``null`` (or ``all``), and so does :meth:`Config.to_dict`.
ALL_ROWS = 0


@dataclass(frozen=True)
class ParitySettings:
    """How parity is checked.

    ``sample_rows`` (a GPU backend) and ``numpy_sample_rows`` (the numpy backend): query rows
    compared with FP64 per shape, seeded, the first and last row always in; :data:`ALL_ROWS`:
    every row. ``--sample-rows`` (``RunOptions.sample_rows``, the runner's ``sample_rows``,
    meta.json's ``sample_rows``) beats both where given; there None is "not given: the config's".
    ``mma``: how the numerics model that judges the kernels accumulates P.V (:data:`MMA_MODES`).
    """

    sample_rows: int = ALL_ROWS
    numpy_sample_rows: int = 8
    determinism: bool = True
    mma: str = DEFAULT_MMA

    def rows_for(self, numpy: bool, given: int | None = None) -> int:
        """Rows compared per shape: ``given`` (``--sample-rows``) where not None, else the
        config's for the backend (``numpy``: the numpy backend's); :data:`ALL_ROWS`: every row."""
        if given is not None:
            return given
        return self.numpy_sample_rows if numpy else self.sample_rows


@dataclass(frozen=True)
class RefFigure:
    """A reference figure for one shape and variant (the PR's): ms per chunk and max error."""

    ms: float | None = None
    err: float | None = None


class FigureTable(dict):
    """``{shape label: {variant: RefFigure}}``: keyed by the shape's label (the shape string as
    written in ``shapes``, or its ``label:``).

    Lookups also accept the key as written under ``figures:`` and the exact ``CTXxQ`` numbers,
    so ``figures["1.5K"]``, ``figures["0x1536"]`` and ``figures[shape]`` all find the PR's
    third row.
    """

    def __init__(self, data: Mapping = (), aliases: Mapping[str, str] | None = None):
        super().__init__(data)
        self.aliases = dict(aliases or {})

    def _resolve(self, key: Any) -> Any:
        if isinstance(key, Shape):
            for candidate in (key.label, key.spec):
                if dict.__contains__(self, candidate) or candidate in self.aliases:
                    return self._resolve(candidate)
            return key.label
        return self.aliases.get(key, key)

    def __missing__(self, key):
        resolved = self._resolve(key)
        if resolved != key and dict.__contains__(self, resolved):
            return dict.__getitem__(self, resolved)
        raise KeyError(key)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, self._resolve(key))

    def get(self, key, default=None):
        return dict.get(self, self._resolve(key), default)


@dataclass(frozen=True)
class Reference:
    """Reference figures to print beside ours, and where they come from."""

    source: str
    figures: FigureTable = field(default_factory=FigureTable)

    def figure(self, shape: Shape | str, variant: str) -> RefFigure | None:
        """The figure for a shape (Shape, its label or its string) and variant, or None."""
        row = self.figures.get(shape)
        return None if row is None else row.get(variant)


@dataclass(frozen=True)
class Config:
    """A validated config. Build with :func:`load_config` or :meth:`with_overrides`."""

    name: str
    shapes: tuple[Shape, ...]
    description: str = ""
    heads_q: int = 32
    heads_kv: int = 8
    head_dim: int = 128
    layout: str = "paged"
    page: int = 64
    data: str = "realistic"
    data_file: str | None = None
    seed: int = 0
    out_dtype: str = "float32"
    softmax_scale: float | None = None
    force_turing: bool = False
    deadline: float | None = None   # seconds one GPU wait may take (None: scaled with its work)
    plugins: tuple[str, ...] = ()   # modules (or .py files) that register variants: pa_bench.problem.plugins
    variants: tuple[str, ...] = field(default_factory=registry.names)  # every registered variant
    timing: TimingSettings = field(default_factory=TimingSettings)
    parity: ParitySettings = field(default_factory=ParitySettings)
    reference: Reference | None = None
    path: str | None = None

    @property
    def resolved_softmax_scale(self) -> float:
        """The softmax scale actually used: the configured one or ``1/sqrt(head_dim)``."""
        if self.softmax_scale is not None:
            return self.softmax_scale
        return 1.0 / math.sqrt(self.head_dim)

    def ref_figure(self, shape: Shape | str, variant: str) -> RefFigure | None:
        """The config's reference figure for this shape and variant, if any."""
        return None if self.reference is None else self.reference.figure(shape, variant)

    def to_dict(self) -> dict:
        """Plain data (YAML/JSON-able) that loads back to an equal config; ``path`` is left out."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["shapes"] = [_shape_to_yaml(s) for s in self.shapes]
        for key, value in vars(self).items():   # the fields, in their order
            if key in ("name", "description", "shapes", "timing", "parity", "reference", "path"):
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        out["timing"] = asdict(self.timing)
        out["parity"] = _parity_dict(self.parity)
        if self.reference is not None:
            out["reference"] = {
                "source": self.reference.source,
                "figures": {  # keyed like shapes are written: label, or CTXxQ if labelled
                    _shape_key(self.shapes, key): {v: {"ms": fig.ms, "err": fig.err}
                                                   for v, fig in row.items()}
                    for key, row in self.reference.figures.items()
                },
            }
        return out

    def with_overrides(self, **overrides: Any) -> "Config":
        """A new validated Config with some fields replaced (command-line overrides).

        Keys are Config fields (``shapes`` may be a comma string or strings, ``variants`` a comma
        string), ``timing``/``parity`` as dicts, or the fields of TimingSettings/ParitySettings
        directly (``hot=True``, ``max_seconds=5``, ``sample_rows=64``). A value of ``None``
        means "not given" and keeps the config's value. Reference figures for shapes that are
        no longer in the config are dropped.
        """
        raw = self.to_dict()
        top = {f.name for f in fields(Config)} - {"path"}
        timing_keys = {f.name for f in fields(TimingSettings)}
        parity_keys = {f.name for f in fields(ParitySettings)}
        shapes_given = False
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "shapes":
                shapes_given = True
                raw["shapes"] = list(parse_shapes(value))
            elif key == "variants" and isinstance(value, str):
                raw["variants"] = [v.strip() for v in value.split(",") if v.strip()]
            elif key == "data_file":
                raw["data_file"] = str(Path(value).expanduser().resolve())
            elif key in ("timing", "parity"):
                sub = value if isinstance(value, Mapping) else _settings_dict(value)
                raw[key] = {**raw[key], **(_rows_as_yaml(sub) if key == "parity" else sub)}
            elif key in top:
                raw[key] = list(value) if isinstance(value, tuple) else value
            elif key in timing_keys:
                raw["timing"][key] = value
            elif key in parity_keys:
                raw["parity"].update(_rows_as_yaml({key: value}))
            else:
                known = sorted(top | timing_keys | parity_keys)
                raise ConfigError(f"override: unknown key {key!r}{_did_you_mean(key, known)}")
        where = f"{self.path or self.name} (with overrides)"
        return _build(raw, where=where, base_dir=Path.cwd(), path=self.path,
                      drop_stale_figures=shapes_given)


_ROW_KEYS = ("sample_rows", "numpy_sample_rows")


def _rows_as_yaml(d: Mapping[str, Any]) -> dict:
    """Parity values as YAML writes them: :data:`ALL_ROWS` as null."""
    return {k: None if k in _ROW_KEYS and type(v) is int and v == ALL_ROWS else v for k, v in d.items()}


def _parity_dict(p: "ParitySettings") -> dict:
    return _rows_as_yaml(asdict(p))


def _settings_dict(obj: Any) -> dict:
    try:
        return asdict(obj)
    except TypeError:
        raise ConfigError(f"override: expected a mapping or settings object, got {obj!r}") from None


def _shape_key(shapes: tuple[Shape, ...], label: str) -> str:
    for shape in shapes:
        if shape.label == label:
            return shape.written
    return label


def _shape_to_yaml(shape: Shape) -> str | dict:
    return shape.label if shape.written == shape.label else {"shape": shape.spec, "label": shape.label}


# --------------------------------------------------------------------------- YAML reading


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars and an error on duplicate keys."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                           "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool",
                              re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"),
                              list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _construct_bool(loader, node):
    return loader.construct_scalar(node).lower() == "true"


def _construct_int(loader, node):
    return int(loader.construct_scalar(node))


def _construct_float(loader, node):
    text = loader.construct_scalar(node).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text.endswith(".nan"):
        return float("nan")
    return float(text)


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise ConfigError(f"duplicate key {key!r} at line {mark.line + 1}")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def packaged_configs() -> list[str]:
    """The bare names of the configs pa-bench ships (``pr2092``, ``smoke`` ...), sorted."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def resolve_config_path(path: str | Path) -> Path:
    """The file ``path`` names: the path itself where it exists; else, for a relative path that
    names a packaged config (``smoke``, ``smoke.yaml`` or ``configs/smoke.yaml``), the packaged
    copy, so the README's ``configs/<name>.yaml`` works from any directory and from a wheel."""
    p = Path(path).expanduser()
    if p.exists() or p.is_absolute():
        return p
    parent = p.parent.as_posix()
    if parent in (".", "configs") and p.suffix in ("", ".yaml"):
        named = CONFIG_DIR / f"{p.stem}.yaml"
        if named.is_file():
            return named
    return p


def not_found_message(shown: str) -> str:
    """A missing config, in one line that names the packaged configs one can give instead."""
    names = ", ".join(packaged_configs())
    return f"{shown}: config file not found (packaged configs, by name: {names})"


def read_yaml(p: Path, shown: str) -> Any:
    """The parsed YAML of a config file (pa-bench's YAML rules, ``_Loader``), or a one-line
    ConfigError naming ``shown``: missing, a directory, unreadable, or invalid YAML."""
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(not_found_message(shown)) from None
    except IsADirectoryError:
        raise ConfigError(f"{shown}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: cannot read config file ({exc.__class__.__name__}: {exc})") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except ConfigError as exc:
        raise ConfigError(f"{shown}: {exc}") from None
    except yaml.YAMLError as exc:
        marked = isinstance(exc, yaml.MarkedYAMLError)
        mark = exc.problem_mark if marked else None
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = (exc.problem if marked else None) or str(exc).splitlines()[0]
        raise ConfigError(f"{shown}: invalid YAML{where}: {problem}") from None


def load_config(path: str | Path = DEFAULT_CONFIG) -> Config:
    """Read and validate a config file. A bare name (``smoke``) also finds ``configs/smoke.yaml``."""
    p = resolve_config_path(path)
    shown = str(path)
    raw = read_yaml(p, shown)
    if raw is None:
        raise ConfigError(f"{shown}: config file is empty")
    return _build(raw, where=shown, base_dir=p.resolve().parent, path=shown)


def config_defaults() -> dict:
    """``Config.to_dict()`` of a config that sets nothing: the value of a key a stored config
    written before the key existed stands for (pa_bench.resume, pa_bench.store.merge)."""
    return Config(name="_", shapes=()).to_dict()


def config_from_dict(raw: Mapping[str, Any], where: str, path: str | None = None) -> Config:
    """A validated config from plain data (``Config.to_dict()``, as a run's meta.json stores it)."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: no config stored")
    return _build(dict(raw), where=where, base_dir=Path.cwd(), path=path)


# --------------------------------------------------------------------------- validation


def _did_you_mean(key: str, known) -> str:
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f" (known: {', '.join(sorted(known))}){hint}"


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class _Checker:
    """Validation helpers whose errors all read ``<file>: <key>: <problem>``."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key}: {problem}")

    def mapping(self, value: Any, key: str, known: set[str]) -> dict:
        if not isinstance(value, Mapping):
            raise self.fail(key or "top level", f"expected a mapping, got {_type_name(value)}")
        for k in value:
            if k not in known:
                full = f"{key}.{k}" if key else str(k)
                raise ConfigError(f"{self.where}: unknown key {full!r}{_did_you_mean(k, known)}")
        return dict(value)

    def integer(self, value: Any, key: str, minimum: int | None = None, optional=False):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {_type_name(value)} {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        return int(value)

    def number(self, value: Any, key: str, positive=False, minimum=None, optional=False):
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"expected a number, got {_type_name(value)} {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise self.fail(key, f"must be finite, got {value}")
        if positive and value <= 0:
            raise self.fail(key, f"must be greater than 0, got {value}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_type_name(value)} {value!r}")
        return value

    def string(self, value: Any, key: str, allow_empty=False) -> str:
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            raise self.fail(key, f"expected a non-empty string, got {_type_name(value)} {value!r}")
        return value

    def choice(self, value: Any, key: str, choices) -> str:
        if value not in choices:
            raise self.fail(key, f"must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value


_TOP_KEYS = {f.name for f in fields(Config)} - {"path"}


def _build(raw: Any, *, where: str, base_dir: Path, path: str | None,
           drop_stale_figures: bool = False) -> Config:
    c = _Checker(where)
    raw = c.mapping(raw, "", _TOP_KEYS)
    defaults = vars(Config(name="_", shapes=()))
    for required in ("name", "shapes"):
        if required not in raw:
            raise ConfigError(f"{where}: missing required key {required!r}")

    name = c.string(raw["name"], "name")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise c.fail("name", f"use letters, digits, '.', '_' or '-' (it names run directories); "
                             f"got {name!r}")
    description = raw.get("description", "") or ""
    c.string(description, "description", allow_empty=True)

    shapes = _shapes(c, raw["shapes"])

    def get(key):
        return raw.get(key, defaults[key])

    heads_q = c.integer(get("heads_q"), "heads_q", 1)
    heads_kv = c.integer(get("heads_kv"), "heads_kv", 1)
    if heads_q % heads_kv:
        raise c.fail("heads_kv", f"{heads_kv} must divide heads_q ({heads_q})")
    head_dim = c.integer(get("head_dim"), "head_dim")
    c.choice(head_dim, "head_dim", HEAD_DIMS)
    layout = c.choice(get("layout"), "layout", LAYOUTS)
    page = c.integer(get("page"), "page")
    if page < 16 or page & (page - 1):
        raise c.fail("page", f"must be a power of two >= 16, got {page}")
    data = c.choice(get("data"), "data", DATA_KINDS)
    data_file = get("data_file")
    if data_file is not None:
        data_file = str((base_dir / Path(c.string(data_file, "data_file")).expanduser()).resolve())
    if data == "npz":
        if data_file is None:
            raise c.fail("data_file", "is required when data is npz (a .npz with q and k, v "
                                      "or k_i8, v_i8, k_scale, v_scale)")
        if not Path(data_file).is_file():
            raise c.fail("data_file", f"file not found: {data_file}")
    seed = c.integer(get("seed"), "seed", 0)
    out_dtype = c.choice(get("out_dtype"), "out_dtype", OUT_DTYPES)
    softmax_scale = c.number(get("softmax_scale"), "softmax_scale", positive=True, optional=True)
    force_turing = c.boolean(get("force_turing"), "force_turing")
    deadline = c.number(get("deadline"), "deadline", positive=True, optional=True)
    plugin_names = _plugins(c, get("plugins"), base_dir)
    variants = _variants(c, get("variants"))
    timing = _timing(c, raw.get("timing", {}) or {})
    parity = _parity(c, raw.get("parity", {}) or {})
    reference = _reference(c, raw.get("reference"), shapes, drop_stale_figures)

    return Config(
        name=name, shapes=shapes, description=description, heads_q=heads_q, heads_kv=heads_kv,
        head_dim=head_dim, layout=layout, page=page, data=data, data_file=data_file, seed=seed,
        out_dtype=out_dtype, softmax_scale=softmax_scale, force_turing=force_turing,
        deadline=deadline, plugins=plugin_names, variants=variants, timing=timing, parity=parity,
        reference=reference, path=path,
    )


def _plugins(c: _Checker, value: Any, base_dir: Path) -> tuple[str, ...]:
    """Load the installed plug-ins and the config's (before its variants are checked: plug-ins
    register variants); the config keeps each one's canonical name (a file's absolute path)."""
    from pa_bench.problem import plugins
    from pa_bench.errors import PluginError

    try:
        plugins.load_installed()
    except PluginError as exc:
        raise ConfigError(f"{c.where}: {exc}") from None
    if value is None or value == ():
        return ()
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)):
        raise c.fail("plugins", f"expected a list of module names or .py files, got {_type_name(value)}")
    out = []
    for i, name in enumerate(value):
        name = c.string(name, f"plugins[{i}]")
        try:
            out.append(plugins.load(name, base_dir=base_dir))
        except PluginError as exc:
            raise c.fail(f"plugins[{i}]", str(exc)) from None
    return tuple(out)


def _shapes(c: _Checker, value: Any) -> tuple[Shape, ...]:
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, Shape):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise c.fail("shapes", "expected a non-empty list of shapes (CTXxQ strings or "
                               "{shape, label} mappings)")
    shapes: list[Shape] = []
    seen: dict[tuple[int, int], str] = {}
    for i, item in enumerate(value):
        key = f"shapes[{i}]"
        try:
            if isinstance(item, Shape):
                shape = item
            elif isinstance(item, Mapping):
                item = c.mapping(item, key, {"shape", "label"})
                if "shape" not in item:
                    raise c.fail(key, "a mapping needs a 'shape' key, e.g. {shape: 0x1536, label: 1.5K}")
                text = c.string(item["shape"], f"{key}.shape")
                label = item.get("label")
                if label is not None:
                    label = str(label) if isinstance(label, (int, float)) else c.string(label, f"{key}.label")
                shape = parse_shape(text, label)
            elif isinstance(item, str):
                shape = parse_shape(item)
            else:
                raise c.fail(key, f"expected a shape string like 32Kx1024, got {_type_name(item)} "
                                  f"{item!r} (quote it)")
        except ShapeError as exc:
            raise c.fail(key, str(exc)) from None
        dims = (shape.context, shape.queries)
        if dims in seen:
            raise c.fail(key, f"shape {shape.label!r} ({shape.spec}) is listed twice "
                              f"(also {seen[dims]!r})")
        if shape.label in {s.label for s in shapes}:
            raise c.fail(key, f"label {shape.label!r} is used twice")
        seen[dims] = shape.label
        shapes.append(shape)
    return tuple(shapes)


def _variants(c: _Checker, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not value:
        raise c.fail("variants", f"expected a non-empty list from {', '.join(registry.names())}")
    out: list[str] = []
    for v in value:
        c.choice(v, "variants", registry.names())
        if v in out:
            raise c.fail("variants", f"{v!r} is listed twice")
        out.append(v)
    return tuple(out)


def _timing(c: _Checker, value: Any) -> TimingSettings:
    d = c.mapping(value, "timing", {f.name for f in fields(TimingSettings)})
    dflt = asdict(TimingSettings())

    def get(key):
        return d.get(key, dflt[key])

    t = TimingSettings(
        hot=c.boolean(get("hot"), "timing.hot"),
        warmup=c.integer(get("warmup"), "timing.warmup", 0),
        min_seconds=c.number(get("min_seconds"), "timing.min_seconds", minimum=0.0),
        max_seconds=c.number(get("max_seconds"), "timing.max_seconds", positive=True),
        max_noise=c.number(get("max_noise"), "timing.max_noise", positive=True),
        min_samples=c.integer(get("min_samples"), "timing.min_samples", 1),
        max_samples=c.integer(get("max_samples"), "timing.max_samples", 1),
        l2_flush=c.choice(get("l2_flush"), "timing.l2_flush", L2_FLUSHES),
        placements=c.integer(get("placements"), "timing.placements", 1),
        prime=c.boolean(get("prime"), "timing.prime"),
        round_samples=c.integer(get("round_samples"), "timing.round_samples", 1),
        slow=c.string(get("slow"), "timing.slow", allow_empty=True),
    )
    try:
        slow_spec(t.slow)
    except ValueError as exc:
        raise c.fail("timing.slow", str(exc).removeprefix("timing.slow: ")) from None
    if t.round_samples > MAX_ROUND_SAMPLES:
        raise c.fail("timing.round_samples", f"({t.round_samples}) must be at most {MAX_ROUND_SAMPLES}")
    if t.placements > MAX_PLACEMENTS:
        raise c.fail("timing.placements", f"({t.placements}) must be at most {MAX_PLACEMENTS}")
    if t.max_samples < t.min_samples:
        raise c.fail("timing.max_samples",
                     f"({t.max_samples}) must be at least timing.min_samples ({t.min_samples})")
    return t


def _parity(c: _Checker, value: Any) -> ParitySettings:
    d = c.mapping(value, "parity", {f.name for f in fields(ParitySettings)})
    dflt = _parity_dict(ParitySettings())

    def get(key):
        return d.get(key, dflt[key])

    def rows(key: str) -> int:
        value = get(key)
        if value is None or value == "all":
            return ALL_ROWS
        if isinstance(value, bool) or not isinstance(value, int):
            raise c.fail(f"parity.{key}", f"expected a number of rows or null (every row), "
                                          f"got {_type_name(value)} {value!r}")
        if value < 1:
            raise c.fail(f"parity.{key}", f"must be at least 1 (null: every row), got {value}")
        return value

    return ParitySettings(
        sample_rows=rows("sample_rows"),
        numpy_sample_rows=rows("numpy_sample_rows"),
        determinism=c.boolean(get("determinism"), "parity.determinism"),
        mma=c.choice(get("mma"), "parity.mma", MMA_MODES),
    )


def _match_shape(key: str, shapes: tuple[Shape, ...]) -> Shape | None:
    for s in shapes:
        if key in (s.label, s.spec):
            return s
    try:
        parsed = parse_shape(key)
    except ShapeError:
        return None
    for s in shapes:
        if (s.context, s.queries) == (parsed.context, parsed.queries):
            return s
    return None


def _reference(c: _Checker, value: Any, shapes: tuple[Shape, ...],
               drop_stale: bool) -> Reference | None:
    if value is None:
        return None
    d = c.mapping(value, "reference", {"source", "figures"})
    source = c.string(d.get("source", ""), "reference.source", allow_empty=True)
    figures_raw = d.get("figures") or {}
    if not isinstance(figures_raw, Mapping):
        raise c.fail("reference.figures", "expected a mapping {shape: {variant: {ms, err}}}")
    table: dict[str, dict[str, RefFigure]] = {}
    aliases: dict[str, str] = {}
    for key, row in figures_raw.items():
        where = f"reference.figures.{key}"
        key = str(key)
        shape = _match_shape(key, shapes)
        if shape is None:
            if drop_stale:
                continue
            listed = ", ".join(s.label for s in shapes)
            raise c.fail(where, f"{key!r} is not one of the config's shapes ({listed})")
        if shape.label in table:
            raise c.fail(where, f"a second entry for shape {shape.label!r}")
        row = c.mapping(row, where, set(registry.names()))
        figs: dict[str, RefFigure] = {}
        for variant, fig in row.items():
            fkey = f"{where}.{variant}"
            fig = c.mapping(fig if fig is not None else {}, fkey, {"ms", "err"})
            figs[variant] = RefFigure(
                ms=c.number(fig.get("ms"), f"{fkey}.ms", positive=True, optional=True),
                err=c.number(fig.get("err"), f"{fkey}.err", minimum=0.0, optional=True),
            )
        table[shape.label] = figs
        for alias in (key, shape.spec):
            if alias != shape.label:
                aliases[alias] = shape.label
    return Reference(source=source, figures=FigureTable(table, aliases))


__all__ = [
    "Config", "TimingSettings", "ParitySettings", "ALL_ROWS", "MMA_MODES", "DEFAULT_MMA", "config_defaults", "Reference", "RefFigure", "FigureTable",
    "load_config", "config_from_dict", "resolve_config_path", "packaged_configs", "DEFAULT_CONFIG", "CONFIG_DIR", "LAYOUTS", "DATA_KINDS", "OUT_DTYPES", "HEAD_DIMS",
]

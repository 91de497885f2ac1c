"""Matrix files: TOML read with tomllib into a validated :class:`MatrixSpec`.

Option keys are the flags of the cell's command without the leading dashes
(``nproc_per_node`` or ``nproc-per-node`` for ``--nproc-per-node``); values
are TOML scalars. Every mistake is one line naming the file and the key.
"""

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from mtb.config import ConfigError, setting, structure_into
from mtb.errors import UsageError
from mtb.slurm import settings as slurm_settings

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
SCALARS = (str, int, float, bool)
#: keys the matrix sets itself for every cell
RESERVED = ("output",)
EXECUTORS = ("local", "slurm")


def _name(instance, attribute, value):
    if not NAME.match(value):
        raise ConfigError(attribute.name, f"{value!r} must be lower-case letters, digits, . _ -")


def _options(where: str, table: dict) -> dict:
    """A table of flag names to scalars, keys normalised to underscores."""
    out = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name in RESERVED:
            raise ConfigError(f"{where}.{key}", "is set by the matrix for every cell")
        if not isinstance(value, SCALARS):
            raise ConfigError(f"{where}.{key}", f"must be a string, number or boolean: {value!r}")
        out[name] = value
    return out


@attrs.frozen(kw_only=True)
class MatrixSpec:
    """A sweep: [options] for every cell, [axes] multiplied out, [[include]] and [[exclude]]."""

    name: str = setting(help="matrix name (names its output directory)", validator=_name)
    description: str = setting("", help="what the matrix measures")
    command: str = setting("run", help="mtb sub-command every cell runs, e.g. run or moe route")
    repeats: int = setting(1, help="independent runs of each cell", minimum=1)
    timeout_s: float = setting(1800.0, help="wall-clock limit of one cell", unit="s", minimum=1)
    executor: str = setting(
        "local",
        help="where cells run: local (one after another here) or slurm (each a job)",
        choices=EXECUTORS,
    )
    #: the [slurm] table: every job's resources (mtb.slurm.settings)
    slurm: dict[str, Any] = attrs.field(factory=dict)
    options: dict[str, Any] = attrs.field(factory=dict)
    axes: dict[str, list[Any]] = attrs.field(factory=dict)
    include: list[dict[str, Any]] = attrs.field(factory=list)
    exclude: list[dict[str, Any]] = attrs.field(factory=list)

    def __attrs_post_init__(self):
        object.__setattr__(self, "options", _options("options", self.options))
        for key, values in self.axes.items():
            if not values:
                raise ConfigError(f"axes.{key}", "must list at least one value")
            for value in values:
                _options("axes", {key: value})
        object.__setattr__(
            self, "axes", {key.replace("-", "_"): list(v) for key, v in self.axes.items()}
        )
        for field in ("include", "exclude"):
            tables = [_options(f"{field}[{i}]", t) for i, t in enumerate(getattr(self, field))]
            object.__setattr__(self, field, tables)


def from_dict(raw: dict, origin: str) -> MatrixSpec:
    try:
        for key in ("options", "axes", "slurm"):
            if not isinstance(raw.get(key, {}), dict):
                raise ConfigError(key, "must be a table")
        for key, values in raw.get("axes", {}).items():
            if not isinstance(values, list):
                raise ConfigError(f"axes.{key}", f"must be a list of values, got {values!r}")
        for key in ("include", "exclude"):
            if not all(isinstance(t, dict) for t in raw.get(key, [])):
                raise ConfigError(key, "must be an array of tables ([[include]])")
        spec = structure_into(MatrixSpec, raw)
        slurm_settings.from_table(spec.slurm)
        return spec
    except ConfigError as error:
        raise UsageError(f"{origin}: {error}") from None


def load(path: str) -> MatrixSpec:
    """The matrix in the TOML file at ``path``, or one UsageError line."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"matrix: cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"matrix: {path} is not valid TOML: {error}") from None
    return from_dict(raw, path)


def preset_names() -> list[str]:
    folder = resources.files("mtb.matrix") / "presets"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> MatrixSpec:
    """A matrix shipped with mtb-core (``mtb matrix presets`` lists them)."""
    if name not in preset_names():
        raise UsageError(f"--preset: {name!r} is not one of: {', '.join(preset_names())}")
    text = (resources.files("mtb.matrix") / "presets" / f"{name}.toml").read_text("utf-8")
    return from_dict(tomllib.loads(text), f"preset {name}")


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set``: VALUE read as a TOML value, else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--set: {text!r} is not KEY=VALUE")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    if not isinstance(parsed, SCALARS):
        raise UsageError(f"--set: {key}: must be a string, number or boolean")
    return key.strip().replace("-", "_"), parsed


def with_overrides(spec: MatrixSpec, overrides: list[tuple[str, Any]]) -> MatrixSpec:
    """Each ``--set KEY=VALUE`` laid over [options], fixing an axis of that name to VALUE."""
    if not overrides:
        return spec
    options, axes = dict(spec.options), dict(spec.axes)
    for key, value in overrides:
        if key in RESERVED:
            raise UsageError(f"--set: {key} is set by the matrix for every cell")
        options[key] = value
        axes.pop(key, None)
    include = [{k: v for k, v in t.items() if k not in options} for t in spec.include]
    return attrs.evolve(spec, options=options, axes=axes, include=include)

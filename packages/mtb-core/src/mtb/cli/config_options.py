"""Click options generated from the config classes' fields.

Defaults shown in ``--help`` come from the attrs defaults; the options
themselves default to None so that only flags the user typed override the
preset and the TOML file.
"""

import types
import typing
from typing import Any

import attrs
import click

from mtb.config import SECTIONS, LaunchConfig, RunConfig
from mtb.errors import PluginError
from mtb.flags import SEPARATOR
from mtb.options import section as options_table
from mtb.registry import KINDS, declared_options

LAUNCH = LaunchConfig.SECTION
PARAM_TYPES: dict[object, click.ParamType] = {int: click.INT, float: click.FLOAT}


def _base_type(annotation):
    if isinstance(annotation, types.UnionType):
        return next(t for t in annotation.__args__ if t is not type(None))
    return annotation


def _shown_default(field) -> str:
    if field.metadata.get("shown_default"):
        return field.metadata["shown_default"]
    if field.default is attrs.NOTHING:
        return "from preset"
    if isinstance(field.default, bool):
        return "on" if field.default else "off"
    return str(field.default)


def _allowed(field) -> str:
    """The field's bounds as "; allowed: 1 to 100" ("" for an unbounded field)."""
    minimum, below, maximum = field.metadata.get("range", (None, None, None))
    if maximum is not None:
        return f"; allowed: {minimum} to {maximum}"
    if below is not None:
        return f"; allowed: {minimum} to below {below}"
    return "" if minimum is None else f"; allowed: >= {minimum}"


def _help(field) -> str:
    """Help text ending in "[default: D; unit: U; allowed: A]"."""
    meta = field.metadata
    unit = f"; unit: {meta['unit']}" if meta.get("unit") else ""
    return f"{meta['help']}  [default: {_shown_default(field)}{unit}{_allowed(field)}]"


def option_for(section: str | None, field):
    """The click option of one config field (``section`` None for top-level fields)."""
    meta = field.metadata
    flag = meta.get("flag") or "--" + field.name.replace("_", "-")
    dest = f"{section}{SEPARATOR}{field.name}" if section else field.name
    kind = _base_type(field.type)
    extra: dict[str, Any] = {}
    if meta.get("metavar"):
        extra["metavar"] = meta["metavar"]
    if kind is bool:
        flag = f"{flag}/--no-{flag[2:]}"
    elif typing.get_origin(kind) is tuple:  # repeatable; not given stays None
        extra.update(multiple=True, callback=lambda ctx, param, value: value or None)
    elif meta.get("choices"):
        extra["type"] = click.Choice(meta["choices"])
    else:
        extra["type"] = PARAM_TYPES.get(kind, click.STRING)
    return click.option(flag, dest, default=None, help=_help(field), **extra)


def _config_fields() -> list[tuple[str | None, attrs.Attribute]]:
    """(section or None, attrs field) of every config field that is a flag of ``mtb run``."""
    fields: list[tuple[str | None, attrs.Attribute]] = [
        (None, f) for f in attrs.fields(RunConfig) if not f.metadata.get("section")
    ]
    return fields + [(name, f) for name, cls in SECTIONS.items() for f in attrs.fields(cls)]


def config_options(command):
    """Decorate ``command`` with one option per config field."""
    for section, field in reversed(_config_fields()):
        command = option_for(section, field)(command)
    return command


def _core_flags() -> set[str]:
    """The flags ``mtb run`` has of its own, their ``--no-`` forms included."""
    flags = {"--config", "--print-config"}
    for _, field in _config_fields():
        flag = field.metadata.get("flag") or "--" + field.name.replace("_", "-")
        flags |= {flag, f"--no-{flag[2:]}"}
    return flags


def launch_options(command):
    """Decorate a command with core's ``[launch]`` flags, meaning what they mean for mtb run."""
    for field in reversed(attrs.fields(LaunchConfig)):
        command = option_for(LAUNCH, field)(command)
    return command


def split_launch(params: dict) -> tuple[dict, dict]:
    """The flags a user gave, as (``[launch]`` keyword arguments, everything else)."""
    launch, rest = {}, {}
    for name, value in params.items():
        if value is None:
            continue
        if name.startswith(LAUNCH + SEPARATOR):
            launch[name.split(SEPARATOR, 1)[1]] = value
        else:
            rest[name] = value
    return launch, rest


def _plugin_option(kind: str, option):
    flag = f"{option.flag}/--no-{option.flag[2:]}" if option.type is bool else option.flag
    kind_type: click.ParamType | None = click.Choice(option.choices) if option.choices else None
    if kind_type is None and option.type is not bool:
        kind_type = PARAM_TYPES.get(option.type, click.STRING)
    unit = f"; unit: {option.unit}" if option.unit else ""
    default = "none" if option.default is None else option.default
    return click.option(
        flag,
        f"{options_table(kind)}{SEPARATOR}{option.name}",
        default=None,
        type=kind_type,
        help=f"{option.help}  [default: {default}{unit}]",
    )


def _declaration(pm, name: str, kind: str, entries: list):
    """The declaration of option ``name``; refused when it would take one of core's flags."""
    option = next(o for o in entries[0].item.options if o.name == name)
    core = _core_flags()
    taken = [flag for flag in (option.flag, f"--no-{option.flag[2:]}") if flag in core]
    if taken:
        raise PluginError(
            f"option {name!r} of {kind.replace('_', ' ')} {entries[0].name!r} of "
            f"{pm.describe(entries[0].plugin)} is named like mtb run's own {taken[0]}; rename it"
        )
    return option


def plugin_options(pm):
    """Decorator adding the options of every registered strategy, backend, profiler, reporter."""
    options = [
        _plugin_option(kind, _declaration(pm, name, kind, entries))
        for name, (kind, entries) in declared_options(pm).items()
    ]

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def plugin_option_groups(pm) -> dict[str, str]:
    """Parameter name -> the ``--help`` section of the plugins that declare it."""
    groups = {}
    for name, (kind, entries) in declared_options(pm).items():
        noun = KINDS[kind].name.replace("_", " ") if len(entries) == 1 else KINDS[kind].label
        names = ", ".join(entry.name for entry in entries)
        groups[f"{options_table(kind)}{SEPARATOR}{name}"] = f"Options of {noun} {names}"
    return groups


class GroupedOptionsCommand(click.Command):
    """A command whose ``--help`` lists some options under their own headings."""

    def __init__(self, *args, option_groups: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.option_groups = option_groups

    def format_options(self, ctx, formatter):
        sections: dict[str, list] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                title = self.option_groups.get(param.name, "Options")
                sections.setdefault(title, []).append(record)
        for title, rows in sections.items():
            with formatter.section(title):
                formatter.write_dl(rows)

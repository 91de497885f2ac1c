"""Click options generated from the config classes' fields.

Defaults shown in ``--help`` come from the attrs defaults; the options
themselves default to None so that only flags the user typed override the
preset and the TOML file.
"""

import types

import attrs
import click

from mtb.config import SECTIONS, LaunchConfig, RunConfig
from mtb.flags import SEPARATOR

LAUNCH = LaunchConfig.SECTION


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


def _help(field) -> str:
    """Help text ending in "[default: D; unit: U]"."""
    meta = field.metadata
    unit = f"; unit: {meta['unit']}" if meta.get("unit") else ""
    return f"{meta['help']}  [default: {_shown_default(field)}{unit}]"


def option_for(section: str | None, field):
    """The click option of one config field (``section`` None for top-level fields)."""
    meta = field.metadata
    flag = meta.get("flag") or "--" + field.name.replace("_", "-")
    dest = f"{section}{SEPARATOR}{field.name}" if section else field.name
    kind = _base_type(field.type)
    extra = {}
    if kind is bool:
        flag = f"{flag}/--no-{flag[2:]}"
    elif meta.get("choices"):
        extra["type"] = click.Choice(meta["choices"])
    else:
        extra["type"] = {int: click.INT, float: click.FLOAT}.get(kind, click.STRING)
    return click.option(flag, dest, default=None, help=_help(field), **extra)


def config_options(command):
    """Decorate ``command`` with one option per config field."""
    fields = [(None, f) for f in attrs.fields(RunConfig) if not f.metadata.get("section")]
    fields += [(name, f) for name, cls in SECTIONS.items() for f in attrs.fields(cls)]
    for section, field in reversed(fields):
        command = option_for(section, field)(command)
    return command


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


def _strategy_option(option):
    flag = f"{option.flag}/--no-{option.flag[2:]}" if option.type is bool else option.flag
    kind = click.Choice(option.choices) if option.choices else None
    if kind is None and option.type is not bool:
        kind = {int: click.INT, float: click.FLOAT}.get(option.type, click.STRING)
    unit = f"; unit: {option.unit}" if option.unit else ""
    default = "none" if option.default is None else option.default
    return click.option(
        flag,
        f"strategy_options{SEPARATOR}{option.name}",
        default=None,
        type=kind,
        help=f"{option.help}  [default: {default}{unit}]",
    )


def _declared(pm) -> dict[str, tuple]:
    """Each strategy option name: its declaration and the strategies that declare it."""
    declared: dict[str, tuple] = {}
    for entry in pm.registry("strategy"):
        for option in getattr(entry.item, "options", ()):
            declared.setdefault(option.name, (option, []))[1].append(entry.name)
    return declared


def strategy_options(pm):
    """Decorator adding each registered strategy's options (the registry refuses clashes)."""
    options = [option for option, _ in _declared(pm).values()]

    def decorate(command):
        for option in reversed(options):
            command = _strategy_option(option)(command)
        return command

    return decorate


def strategy_option_groups(pm) -> dict[str, str]:
    """Parameter name -> the ``--help`` section of the strategies that declare it."""
    groups = {}
    for name, (_, strategies) in _declared(pm).items():
        noun = "strategy" if len(strategies) == 1 else "strategies"
        groups[f"strategy_options{SEPARATOR}{name}"] = f"Options of {noun} {', '.join(strategies)}"
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

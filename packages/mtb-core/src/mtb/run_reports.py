"""A run's extra reports (``--report FORMAT[:PATH]``), rendered after its JSON result.

The JSON result is the record and a report only a rendering of it: reports
are resolved and their paths checked before any work, and rendered once the
result is safe, so a reporter that fails costs one line, never the result.
"""

from pathlib import Path

from mtb import output_paths
from mtb.errors import UsageError, one_line
from mtb.reporting import publish

OPTION = "--report"


def parse(spec: str) -> tuple[str, str]:
    """``FORMAT[:PATH]`` as (reporter name, path or ""); names never hold a colon."""
    name, _, path = spec.partition(":")
    return name, path


def names(config) -> list[str]:
    """The reporters the run's reports use, in order."""
    return [parse(spec)[0] for spec in config.reports]


def _reporter(pm, name: str):
    try:
        return pm.registry("reporter").get(name)
    except UsageError as error:
        raise UsageError(f"{OPTION}: {error}") from None


def resolve(config, pm) -> list[str]:
    """Each report as FORMAT:PATH, PATH defaulting to --output with the reporter's suffix."""
    resolved = []
    for name, path in map(parse, config.reports):
        derived = f"{Path(config.output).with_suffix('')}{_reporter(pm, name).suffix}"
        resolved.append(f"{name}:{path or derived}")
    return resolved


def check(config, pm) -> None:
    """Every report path writable, and none the result file or another report's."""
    taken = {Path(config.output).absolute()}
    for name, path in map(parse, config.reports):
        appends = _reporter(pm, name).appends
        if Path(path).absolute() in taken:
            raise UsageError(
                f"{OPTION}: {path}: is written by the result or another report; give another PATH"
            )
        taken.add(Path(path).absolute())
        output_paths.check_file(OPTION, path, overwrite=config.overwrite or appends)


def render(pm, document: dict, config) -> list[str]:
    """Each report of ``config`` written; one line per reporter that raised (the rest still run)."""
    failures = []
    for name, path in map(parse, config.reports):
        try:
            reporter = pm.registry("reporter").get(name).configured(config.reporter_options)
            written = publish(reporter, [document], path)
        except Exception as error:
            entry = pm.registry("reporter").items.get(name)
            plugin = f" of plugin {entry.plugin}" if entry else ""
            failures.append(f"reporter {name!r}{plugin} failed: {one_line(error)}")
            continue
        print(f"report written to {written}", flush=True)
    return failures

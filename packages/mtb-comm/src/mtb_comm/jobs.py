"""What every command does around its workers: launch, document, write, print, exit code.

A failed or timed-out launch still leaves a document (status failed, oom or
timeout); a correctness check that fails leaves a ``failed`` document and
exits 1 after the table is printed.
"""

import datetime as dt
import os
from pathlib import Path

import attrs

from mtb import provenance
from mtb.errors import RunFailed
from mtb.launcher import LaunchTimeout, run_function
from mtb.results import failure_status
from mtb.worker import plugin_list, write_result
from mtb_comm import results
from mtb_comm.worker import for_measure

WIDTH = 110  # the tables' natural width, kept when stdout is not a terminal


def default_output(kind: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return str(Path("results") / f"{kind}-{stamp}.json")


def with_output(spec, kind: str):
    return spec if spec.output else attrs.evolve(spec, output=default_output(kind))


def _frame(kind: str, spec, pm, started: str) -> dict:
    plugins = plugin_list(pm)
    prov = {**provenance.collect(plugins), "start_utc": started, "end_utc": provenance.utc_now()}
    return {
        "kind": kind,
        "config": results.converter.unstructure(spec),
        "plugins": plugins,
        "provenance": prov,
    }


def _fail(kind: str, spec, pm, started: str, status: str, message: str) -> RunFailed:
    if os.environ.get("RANK", "0") == "0":
        frame = _frame(kind, spec, pm, started)
        document = results.DOCUMENTS[kind](**frame, status=status, error=message)
        write_result(pm, results.to_dict(document), spec.output)
    return RunFailed(message)


def execute(kind: str, spec, pm, measure, build, render) -> dict | None:
    """Run ``measure`` on every rank; rank 0 builds, writes and prints the document.

    ``build(spec, per_rank)`` returns the kind's fields with ``status`` and
    ``error``; ``render(document)`` the rich table. Returns the document dict.
    """
    from mtb.console import plain_console, stdout
    from mtb.output_paths import check_file

    check_file("--output", spec.output)
    started = provenance.utc_now()
    try:
        returned = run_function(spec.launch, for_measure(measure), spec)
    except LaunchTimeout as error:
        raise _fail(kind, spec, pm, started, "timeout", str(error)) from None
    except RunFailed as error:
        raise _fail(kind, spec, pm, started, failure_status(str(error)), str(error)) from None
    if returned is None:  # a torchrun rank other than 0
        return None
    environment, per_rank = returned
    fields = build(spec, per_rank)
    frame = _frame(kind, spec, pm, started)
    frame["provenance"]["nodes"] = environment.pop("nodes")
    document = results.DOCUMENTS[kind](**frame, environment=environment, **fields)
    data = results.to_dict(document)
    write_result(pm, data, spec.output)
    console = stdout if stdout.is_terminal else plain_console(width=WIDTH)
    console.print(render(data))
    print(f"result written to {spec.output}", flush=True)
    if document.status != "ok":
        raise RunFailed(document.error)
    return data

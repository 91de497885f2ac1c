"""What every command does around its workers: launch, document, write, print, exit code.

A failed or timed-out launch still leaves a document (status failed, oom or
timeout); a correctness check that fails leaves a ``failed`` document and
exits 1 after the table is printed.
"""

import os

import attrs

from mtb.api import (
    LaunchTimeout,
    RunFailed,
    default_output,
    document_provenance,
    failure_status,
    plugin_list,
    result_document,
    run_function,
    utc_now,
    write_result,
)
from mtb_comm import results
from mtb_comm.worker import for_measure

WIDTH = 110  # the tables' natural width, kept when stdout is not a terminal


def with_output(spec, kind: str):
    return spec if spec.output else attrs.evolve(spec, output=default_output(kind))


def _document(kind: str, spec, pm, started: str, nodes: list | None = None, **fields):
    """The kind's document: core's frame, the spec as config, and ``fields``."""
    plugins = plugin_list(pm)
    extra = {} if nodes is None else {"nodes": nodes}
    frame = result_document(
        kind,
        plugins=plugins,
        provenance=document_provenance(plugins, started=started, **extra),
        config=results.converter.unstructure(spec),
        **fields,
    )
    return results.DOCUMENTS[kind](**frame)


def _fail(kind: str, spec, pm, started: str, status: str, message: str) -> RunFailed:
    if os.environ.get("RANK", "0") == "0":
        document = _document(kind, spec, pm, started, status=status, error=message)
        write_result(pm, results.to_dict(document), spec.output)
    return RunFailed(message)


def execute(kind: str, spec, pm, measure, build, render) -> dict | None:
    """Run ``measure`` on every rank; rank 0 builds, writes and prints the document.

    ``build(spec, per_rank)`` returns the kind's fields with ``status`` and
    ``error``; ``render(document)`` the rich table. Returns the document dict.
    """
    from mtb.api import check_output, plain_console, stdout

    check_output("--output", spec.output)
    started = utc_now()
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
    nodes = environment.pop("nodes")
    document = _document(kind, spec, pm, started, nodes, environment=environment, **fields)
    data = results.to_dict(document)
    write_result(pm, data, spec.output)
    console = stdout if stdout.is_terminal else plain_console(width=WIDTH)
    console.print(render(data))
    print(f"result written to {spec.output}", flush=True)
    if document.status != "ok":
        raise RunFailed(document.error)
    return data

"""The frame every result document shares, its default path and its atomic write.

Train, profile, comm, tp, moe, megatron, matrix, doctor, fault and checkpoint
verify documents all start from :func:`result_document`, so ``kind``,
``schema_version``, ``status``, ``error``, ``plugins`` and ``provenance``
are spelled and ordered in one place.
"""

import datetime as dt
import sys
from pathlib import Path

from mtb import provenance as provenance_mod
from mtb.reporting import fresh_names, write_atomic, write_new

SCHEMA_VERSION = 1


def plugin_list(pm) -> list[dict]:
    """Name, distribution and version of every loaded plugin, for ``plugins``."""
    return [
        {"name": i.name, "distribution": i.distribution, "version": i.version}
        for i in pm.plugin_infos()
    ]


def document_provenance(
    plugins: list[dict],
    allowed: tuple[str, ...] = (),
    *,
    started: str | None = None,
    finished: bool = True,
    **extra,
) -> dict:
    """The ``provenance`` block: code, software, hardware and image, then the times.

    ``started``: the command's start (UTC, ISO); ``finished`` adds ``end_utc``
    now; ``extra`` (e.g. ``nodes``) goes between them.
    """
    block = {**provenance_mod.collect(plugins, allowed), **extra}
    if started is not None:
        block["start_utc"] = started
    if finished:
        block["end_utc"] = provenance_mod.utc_now()
    return block


def result_document(
    kind: str,
    *,
    status: str = "ok",
    error: str | None = None,
    plugins: list[dict] | None = None,
    provenance: dict | None = None,
    **fields,
) -> dict:
    """``kind``, ``schema_version``, ``status``, ``error``, the kind's ``fields``, then
    ``plugins`` and ``provenance`` when given."""
    document = {
        "kind": kind,
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "error": error,
        **fields,
    }
    if plugins is not None:
        document["plugins"] = plugins
    if provenance is not None:
        document["provenance"] = provenance
    return document


def default_output(kind: str, label: str | None = None) -> str:
    """``results/KIND-<UTC time>[-LABEL].json``, with -2, -3, ... when a run took it this second."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path("results") / "-".join(p for p in (kind, stamp, label) if p)
    path = path.with_name(f"{path.name}.json")
    return str(next(p for p in fresh_names(path) if not p.exists()))


def write_result(pm, document: dict, path: str, overwrite: bool = True) -> str:
    """The JSON result at ``path``; without ``overwrite`` never over another run's file.

    A file that appeared at ``path`` during the run (another run given the same
    --output) is kept: this result goes beside it under a fresh name, said on stderr.
    """
    text = pm.registry("reporter").get("json").render([document])
    if overwrite:
        return str(write_atomic(path, text))
    written = str(write_new(path, text))
    if written != str(path):
        print(f"mtb: {path} was written by another run meanwhile; kept it", file=sys.stderr)
    return written

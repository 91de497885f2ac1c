"""Reading result documents from files and directories, through core's own schema.

Train documents are structured with ``mtb.results.from_document`` (the cattrs
schema core writes with), so a report never reads a layout core would not
write. Any problem is one :class:`mtb.errors.UsageError` naming the file.
"""

import json
from pathlib import Path

import cattrs

from mtb.api import SCHEMA_VERSION, STATUSES, UsageError, from_document

MANIFEST_KIND = "evidence_manifest"


def result_files(paths: list[str]) -> list[Path]:
    """The JSON files named, directories searched recursively, each once, in a stable order."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += sorted(path.rglob("*.json"))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{name}: no such file or directory")
    return list({path.resolve(): path for path in found}.values())


def read_json(path: Path) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(document, dict):
        raise UsageError(
            f"{path}: a result document is a JSON object, not {type(document).__name__}"
        )
    return document


def check_document(path: Path, document: dict) -> dict:
    """The document itself when its kind, schema_version and status can be read."""
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise UsageError(f"{path}: field 'kind' is missing; is this an mtb result document?")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: schema_version {version!r} is not supported "
            f"(this mtb-report reads schema_version {SCHEMA_VERSION}); upgrade mtb-report"
        )
    status = document.get("status")
    if status not in STATUSES:
        raise UsageError(f"{path}: field 'status' is {status!r}; allowed: {', '.join(STATUSES)}")
    if kind == "train":
        try:
            from_document(document)
        except cattrs.BaseValidationError as error:
            detail = cattrs.transform_error(error)[0]
            raise UsageError(f"{path}: not a valid train document: {detail}") from None
    return document


def read_json_lines(path: Path) -> list[dict]:
    """The documents of a JSON Lines log (``--report jsonl``), each checked like a file's."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: not a readable JSON Lines file ({error})") from None
    documents = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                document = json.loads(line)
            except json.JSONDecodeError as error:
                raise UsageError(f"{path}:{number}: not a JSON document ({error})") from None
            if not isinstance(document, dict):
                raise UsageError(f"{path}:{number}: a result document is a JSON object")
            documents.append(document)
    return documents


def read_documents(path: Path) -> list[dict]:
    """A ``.jsonl`` log's documents, or the one document of a JSON file."""
    return read_json_lines(path) if path.suffix == ".jsonl" else [read_json(path)]


def load(paths: list[str]) -> list[dict]:
    """Every result document under ``paths``; evidence manifests are skipped."""
    documents = []
    for path in result_files(paths):
        for document in read_documents(path):
            if document.get("kind") != MANIFEST_KIND:
                documents.append(check_document(path, document))
    if not documents:
        raise UsageError(f"no result documents found in {', '.join(paths)}")
    return documents

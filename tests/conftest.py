"""Shared helpers for the cross-package and end-to-end tests."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_block(marker: str, readme: str = "README.md") -> str:
    """The fenced block that follows ``<!-- marker -->`` in README.md (or another readme)."""
    text = (ROOT / readme).read_text()
    match = re.search(rf"<!-- {marker} -->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"{readme} has no block marked {marker}"
    return match.group(1)

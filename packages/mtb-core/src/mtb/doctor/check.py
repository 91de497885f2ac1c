"""One diagnosis: a status, an actionable message and the facts behind it."""

import attrs

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)


@attrs.define(kw_only=True)
class Check:
    """``message`` says what was found and, unless ok, what to do about it."""

    name: str
    area: str
    status: str = attrs.field(validator=attrs.validators.in_(STATUSES))
    message: str
    details: dict = attrs.Factory(dict)


def worst(checks: list[Check]) -> str:
    """fail beats warn beats ok; skipped checks never decide."""
    statuses = {c.status for c in checks}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else OK

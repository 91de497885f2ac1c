"""One scenario's verdict: named checks, the launches it made, and its evidence."""

import attrs


@attrs.define
class Outcome:
    """Passes when it made at least one check and every check held."""

    name: str
    checks: list[dict] = attrs.field(factory=list)
    launches: list[dict] = attrs.field(factory=list)
    evidence: dict = attrs.field(factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def check(self, what: str, ok, detail=None) -> bool:
        """Record one check; returns whether it held, so a scenario can stop early."""
        self.checks.append({"check": what, "ok": bool(ok), "detail": detail})
        return bool(ok)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c["ok"] for c in self.checks)

    def document(self) -> dict:
        return {
            "name": self.name,
            "status": "passed" if self.passed else "failed",
            "seconds": round(self.seconds, 2),
            "error": self.error,
            "checks": self.checks,
            "launches": self.launches,
            "evidence": self.evidence,
        }

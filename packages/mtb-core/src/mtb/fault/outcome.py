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
    #: why the scenario could not run here (e.g. it needs root); neither passed nor failed
    skipped: str | None = None

    def check(self, what: str, ok, detail=None) -> bool:
        """Record one check; returns whether it held, so a scenario can stop early."""
        self.checks.append({"check": what, "ok": bool(ok), "detail": detail})
        return bool(ok)

    @property
    def passed(self) -> bool:
        """Skipped counts as passed: the smoke's verdict is about what could run."""
        if self.error is None and self.skipped is not None:
            return True
        return self.error is None and bool(self.checks) and all(c["ok"] for c in self.checks)

    @property
    def status(self) -> str:
        if self.error is None and self.skipped is not None:
            return "skipped"
        return "passed" if self.passed else "failed"

    def document(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "error": self.error,
            "skipped": self.skipped,
            "checks": self.checks,
            "launches": self.launches,
            "evidence": self.evidence,
        }

"""What a health probe answers: `service.liveness()` and `await service.readiness()`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HealthReport"]


@dataclass(frozen=True, slots=True)
class HealthReport:
    """A probe's answer: `ok`, and in a sentence why (what failed, or that all is well)."""

    ok: bool
    reason: str

    def as_json(self) -> dict[str, str]:
        """The body the health port sends: `{"status": "ok" | "failing", "reason": ...}`."""
        return {"status": "ok" if self.ok else "failing", "reason": self.reason}

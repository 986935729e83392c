"""The property-based tests' Hypothesis settings, in one place.

By default each test runs its fixed number of sequences, derandomized, so the suite stays
deterministic and within its minutes. `--property-examples N` (tests/conftest.py) runs each
with N random sequences instead, and no time limit: a soak. Random runs of a few thousand
found what the fixed ones had missed for months (a name live under two schedule types, and
four sequences the models misjudged), and each shrunk case then became an example the fixed
run always replays.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings

__all__ = ["property_settings", "property_timeout", "soak"]

_soak_examples = 0


def soak(examples: int) -> None:
    """Sets the number of random sequences every property-based test runs (0: its own)."""
    global _soak_examples
    _soak_examples = examples


def property_settings(max_examples: int, **options: Any) -> settings:
    """Hypothesis settings for a property-based test of `max_examples` fixed sequences
    (`options` adds health checks and such): derandomized, or random under a soak."""
    random = _soak_examples > 0
    return settings(
        max_examples=_soak_examples if random else max_examples,
        derandomize=not random,
        deadline=None,
        database=None,
        **options,
    )


def property_timeout(seconds: float) -> float:
    """The time limit of a test that runs a property-based test inside it: `seconds`, or
    none (0) under a soak. A Hypothesis test itself needs none of this: under a soak
    tests/conftest.py lifts its limit, whatever its marker says."""
    return 0 if _soak_examples else seconds

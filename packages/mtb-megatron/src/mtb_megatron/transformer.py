"""Which transformer implementation a launch uses: Transformer Engine or the PyTorch fallback.

NGC's images bring Transformer Engine; other images may not. ``auto`` uses
it where it is importable and Megatron's own PyTorch layers
(``--transformer-impl local``) otherwise. The fallback runs without sequence
parallelism and is not what Megatron is tuned for, so its numbers are
compatibility evidence only: a performance run on it is refused before
anything starts.
"""

import importlib.util

import attrs

from mtb.api import ConfigError

ENGINE = "transformer_engine"
FALLBACK = "local"


def engine_available() -> bool:
    """Whether Transformer Engine can be imported by the interpreter that launches Megatron."""
    return importlib.util.find_spec(ENGINE) is not None


@attrs.frozen
class Choice:
    """The implementation asked for, the one used, and why it is the fallback (None: it is not)."""

    requested: str
    used: str
    fallback_reason: str | None

    def describe(self) -> str:
        """One line for --dry-run."""
        if self.fallback_reason is None:
            return f"{self.used} (Transformer Engine is importable)"
        return (
            f"{self.used}, the PyTorch fallback ({self.fallback_reason}): "
            "no sequence parallelism, compatibility evidence only"
        )


def choose(requested: str) -> Choice:
    if requested == "auto":
        if engine_available():
            return Choice(requested, ENGINE, None)
        return Choice(requested, FALLBACK, "Transformer Engine is not importable")
    reason = "--transformer-impl local" if requested == FALLBACK else None
    return Choice(requested, requested, reason)


def apply(config):
    """The config with the implementation it will use, and the choice; the fallback refused
    as performance evidence."""
    choice = choose(config.transformer_impl)
    if choice.fallback_reason and config.evidence == "performance":
        raise ConfigError(
            "transformer_impl",
            f"{choice.used} is the PyTorch fallback ({choice.fallback_reason}): compatibility "
            "evidence only; performance evidence needs Transformer Engine",
        )
    return attrs.evolve(config, transformer_impl=choice.used), choice

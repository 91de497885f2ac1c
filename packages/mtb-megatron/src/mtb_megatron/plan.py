"""What a Megatron launch will do, said and checked before it starts.

``--dry-run`` prints the pinned checkout (the default ref is the megatron
image's megatron-core release), the transformer implementation with its
consequences, and whether busy GPUs are refused; a performance run asks
core's busy-GPU guard before its first launch, so numbers are never
measured next to another job (ALLOW_BUSY_GPUS=1 overrides, as for mtb run).
"""

from mtb_megatron.checkout import Checkout
from mtb_megatron.config import DEFAULT_REF, MegatronConfig
from mtb_megatron.transformer import Choice

GUARD = "busy GPUs: refused before the launch (--evidence performance; ALLOW_BUSY_GPUS=1 overrides)"


def lines(config: MegatronConfig, checkout: Checkout, choice: Choice) -> list[str]:
    """The header of --dry-run: checkout, transformer and guard, one comment line each."""
    default = (
        " (the default: the megatron image's megatron-core)" if checkout.ref == DEFAULT_REF else ""
    )
    shown = [
        f"# Megatron-LM {checkout.ref}{default} at {checkout.commit}, "
        f"megatron-core {checkout.core_version}",
        f"# transformer: {choice.describe()}",
    ]
    if config.evidence == "performance":
        shown.append(f"# {GUARD}")
    return shown


def refuse_busy_gpus(config: MegatronConfig) -> None:
    """Core's busy-GPU guard (one line, exit 2) before a performance run's first launch."""
    if config.evidence == "performance":
        from mtb.api import refuse_busy_gpus

        refuse_busy_gpus()

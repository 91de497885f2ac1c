"""What core saves beside the backend's payload: RNG states, train state, and digests.

Our own files are JSON or tensors loaded with ``weights_only=True``; only the
backends' payloads (DCP's pickled ``.metadata``, DeepSpeed's files) use pickle.
"""

import hashlib
import json
import random
from pathlib import Path
from typing import cast

import numpy as np
import torch

from mtb.checkpoint.layout import RNG_DIR, TRAIN_STATE


def rng_path(step_dir: Path, rank: int) -> Path:
    return step_dir / RNG_DIR / f"rank_{rank:05d}.pt"


def capture_rng() -> dict:
    """This process's python, numpy, torch CPU and CUDA generator states."""
    version, internal, gauss = random.getstate()
    # the legacy form (the default): a tuple, never the dict
    legacy = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())
    kind, keys, pos, has_gauss, cached = legacy
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rng(step_dir: Path, rank: int) -> None:
    path = rng_path(step_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(capture_rng(), path)


def load_rng(step_dir: Path, rank: int) -> dict:
    return torch.load(rng_path(step_dir, rank), weights_only=True)


def save_train_state(step_dir: Path, state: dict) -> None:
    (step_dir / TRAIN_STATE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


def load_train_state(step_dir: Path) -> dict:
    return json.loads((step_dir / TRAIN_STATE).read_text(encoding="utf-8"))


def _feed(digest, value) -> None:
    """Hash nested state canonically: sorted keys, tensors as dtype, shape and raw bytes."""
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(f"k:{key};".encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"l{len(value)};".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, torch.Tensor):
        to_local = getattr(value, "to_local", None)
        local = (to_local() if callable(to_local) else value).detach().cpu().contiguous()
        digest.update(f"t:{local.dtype}:{tuple(local.shape)};".encode())
        digest.update(local.reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        digest.update(f"v:{value!r};".encode())


def digest(value) -> str:
    """SHA256 of nested state (dicts, lists, tensors, scalars)."""
    hashed = hashlib.sha256()
    _feed(hashed, value)
    return hashed.hexdigest()


def train_state(
    completed: int, tokens_seen: int, lr: float | None, config, dp_world_size: int
) -> dict:
    """TrainState, data position and scheduler state after ``completed`` optimizer steps."""
    training = config.training
    sequences = config.data.micro_batch_size * training.grad_accum_steps * dp_world_size
    return {
        "step": completed,
        "tokens_seen": tokens_seen,
        "data": {"next_step": completed, "sequences_seen": completed * sequences},
        "scheduler": {"schedule": training.lr_schedule, "step": completed, "last_lr": lr},
    }


TRAIN_STATE_KEYS = ("step", "tokens_seen", "data")


def with_scheduler(saved: dict, training) -> tuple[dict, bool]:
    """A loaded train state with its scheduler state, and whether it had to be rebuilt.

    Early format-1 checkpoints saved no scheduler entry; the schedule is a
    function of the step, so ``mtb checkpoint verify`` rebuilds it from
    ``training`` (the checkpoint's config) to compare them.
    """
    if "scheduler" in saved:
        return saved, False
    from mtb.schedule import lr_at

    step = saved["step"]
    last_lr = lr_at(step - 1, training, training.steps) if step > 0 else None
    rebuilt = {"schedule": training.lr_schedule, "step": step, "last_lr": last_lr}
    return {**saved, "scheduler": rebuilt}, True


def local_digests(engine, backend, current: dict, rng: dict) -> dict:
    """This rank's digests of model, optimizer, scheduler, train state and RNG.

    Every rank calls it together: the model is gathered whole. ``current`` is
    a train state as :func:`train_state` builds it (extra keys are ignored).
    """
    return {
        "model": digest(engine.full_model_state()),
        "optimizer": digest(backend.optimizer_state(engine)),
        "scheduler": digest(current["scheduler"]),
        "train_state": digest({key: current[key] for key in TRAIN_STATE_KEYS}),
        "rng": digest(rng),
    }


def combine_digests(per_rank: list[dict]) -> dict:
    """Rank-ordered digests as one document: shared components once, per-rank ones as lists."""
    first = per_rank[0]
    return {
        "model": first["model"],
        "scheduler": first["scheduler"],
        "train_state": first["train_state"],
        "optimizer": [d["optimizer"] for d in per_rank],
        "rng": [d["rng"] for d in per_rank],
    }

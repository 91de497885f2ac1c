"""The checkpoint lifecycle of a run: resume, periodic saves, publication, retention.

Every rank writes its part of a save into one fresh temporary directory;
after all ranks have finished, rank 0 writes metadata.json, publishes the
directory by rename, writes READY, replaces ``latest`` and only then prunes.
With async saves the payload is written in the background over a separate
gloo group, and publication happens there once every rank's write is done;
the previous save is awaited before the next one and before the run ends.
A resumed run first moves aside the step directories after its resume point
(see recovery.py), so its saves never collide with them; a save that cannot
write fails with one line (see write_errors.py).
"""

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import torch.distributed as dist

from mtb import distributed, provenance
from mtb.checkpoint import layout, recovery, selection, state, summary, write_errors
from mtb.checkpoint import metadata as meta
from mtb.checkpoint.backend import backend_name
from mtb.errors import UsageError
from mtb.reporting import write_atomic


def restart_count() -> int:
    """How often the elastic agent has restarted this worker group."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def backend_for(pm, config, strategy):
    """The configured checkpoint backend, or the strategy's own with ``auto``."""
    name = backend_name(config, strategy)
    backend = pm.registry("checkpoint_backend").get(name)
    if not backend.supports(strategy):
        raise UsageError(
            f"checkpoint.backend: {name!r} cannot checkpoint strategy {strategy.name!r}; "
            f"use 'auto' (its own: {getattr(strategy, 'checkpoint_backend', 'dcp')!r})"
        )
    return backend


def admissible(choice: selection.Choice, config, world_size: int, backend) -> list[str]:
    """Refuse a checkpoint this run cannot continue from; return the allowed differences."""
    document = choice.metadata
    assert choice.path is not None and document is not None, "a chosen checkpoint"
    allowed = meta.check_compatible(
        choice.path, document, config, world_size, backend.reshard_refusal
    )
    if document["step"] >= config.training.steps:
        raise UsageError(
            f"checkpoint.resume: {choice.path.name} is at step {document['step']}, and "
            f"training.steps is {config.training.steps}: nothing left to train"
        )
    return allowed


def preflight(config, pm, strategy) -> None:
    """Before any worker starts: refuse a resume whose checkpoint does not fit the run.

    Missing or corrupt files are left to the workers, which all report them.
    """
    if config.checkpoint.resume is None:
        return
    directory = Path(config.checkpoint.dir) if config.checkpoint.dir else None
    try:
        choice = selection.choose(config.checkpoint.resume, directory)
    except meta.FormatError:
        raise
    except meta.CheckpointError:
        return
    if choice.path is not None:
        admissible(choice, config, config.launch.world_size, backend_for(pm, config, strategy))


@attrs.define
class Resumed:
    """Where a run picked up: the checkpoint, its step and whether the continuation is exact."""

    path: str
    step: int
    tokens_seen: int
    last_lr: float | None
    reason: str
    exact: bool
    from_world_size: int
    allowed_changes: list[str]
    #: seconds spent loading model, optimizer, RNG and train state
    load_s: float
    #: the older checkpoint format it was upgraded from (None: current)
    upgraded_from: int | None = None
    #: what the checkpoint could not restore (an upgraded one may lack RNG states)
    lacks: list[str] = attrs.Factory(list)
    #: why the continuation is not exact beyond ``lacks``: what changed (None: nothing)
    changed: str | None = None

    def document(self) -> dict:
        return attrs.asdict(self)


def layout_change(saved_world: int, saved: str, world: int, layout: str) -> str | None:
    """What differs between the checkpoint's ranks and layout and this run's, in words."""
    if saved_world != world:
        return f"world size changed ({saved_world} -> {world}), data order differs"
    if saved != layout:
        return (
            f"layout changed ({saved} -> {layout}) on the same {world} ranks: the saved "
            "per-rank RNG states do not apply, and a new data-parallel degree draws other batches"
        )
    return None


@attrs.define
class SaveRecord:
    """Timing of one save: how long training was blocked and how long the save took."""

    step: int
    blocked_s: float
    total_s: float | None = None
    bytes: int | None = None
    path: str | None = None


def versions() -> dict:
    import torch

    found: dict[str, str | None] = {"torch": torch.__version__}
    found["deepspeed"] = _distribution_version("deepspeed")
    return found


def _distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


class Checkpointer:
    """One rank's view of the run's checkpoints (every rank builds one, in step)."""

    def __init__(self, context, strategy, pm):
        self.context = context
        self.config = context.config
        self.settings = context.config.checkpoint
        self.strategy = strategy
        self.pm = pm
        self.backend = backend_for(pm, self.config, strategy)
        self.directory = Path(self.settings.dir) if self.settings.dir else None
        self.saves: list[SaveRecord] = []
        self.pending = None
        self.final_wait_s = 0.0
        self.group = None
        self.executor = None
        self.abandoned = self.report_abandoned()
        self.cleared = None
        if self.settings.async_save and self.directory is not None:
            self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtb-ckpt")
            if context.distributed:
                self.group = dist.new_group(backend="gloo")

    def report_abandoned(self) -> list[str]:
        """Temporary directories left by interrupted saves: listed, never counted or resumed."""
        if self.directory is None:
            return []
        found = [str(e.path) for e in layout.abandoned(self.directory)]
        if found and self.context.is_main:
            print(
                f"mtb: {len(found)} abandoned temporary checkpoint director"
                f"{'y' if len(found) == 1 else 'ies'} in {self.directory} (never resumed; "
                f"remove with `mtb checkpoint clean {self.directory}`)",
                file=sys.stderr,
                flush=True,
            )
        return found

    @property
    def target(self) -> Path:
        """checkpoint.dir, where saves go: only runs that set it save."""
        assert self.directory is not None, "saving needs checkpoint.dir"
        return self.directory

    # -- resume ---------------------------------------------------------------------------

    def resume_spec(self) -> str | None:
        """--resume as given; after an elastic restart, ``latest`` by itself."""
        if self.settings.resume is not None:
            return self.settings.resume
        if self.directory is not None and restart_count() > 0:
            return "latest"
        return None

    def choose(self) -> selection.Choice | None:
        spec = self.resume_spec()
        if spec is None:
            return None
        return distributed.agree(self.context, lambda: selection.choose(spec, self.directory))

    def clear_way(self, step: int, path: Path | None) -> None:
        """Rank 0: move aside step directories after the resume point, repair ``latest``."""
        if self.directory is None or not self.context.is_main:
            return
        self.cleared = recovery.clear_way(self.directory, step, path)
        line = recovery.announcement(self.directory, self.cleared)
        if line:
            print(line, file=sys.stderr, flush=True)

    def resume(self, engine) -> Resumed | None:
        """Load the chosen checkpoint into ``engine`` and the RNGs; None to start at step 0."""
        choice = self.choose()
        if choice is None or choice.path is None:
            if choice is not None:
                self.clear_way(0, None)
            return None
        document = choice.metadata
        assert document is not None, "a chosen path comes with its metadata"
        world = self.context.world_size
        allowed = admissible(choice, self.config, world, self.backend)
        self.clear_way(document["step"], choice.path)
        started = time.perf_counter()
        self.backend.load(engine, choice.path, self.context)
        train_state = state.load_train_state(choice.path)
        lacks = document["lacks"]
        layout = meta.saved_layout(document)["label"]
        changed = layout_change(document["world_size"], layout, world, self.context.layout.label)
        same_layout = changed is None
        if same_layout and self.context.rank in document["contents"]["rng_ranks"]:
            state.restore_rng(state.load_rng(choice.path, self.context.rank))
        scaler = train_state.get("grad_scaler")
        if scaler and getattr(engine, "scaler", None) is not None:
            engine.scaler.load_state_dict(scaler)
        return Resumed(
            path=str(choice.path),
            step=document["step"],
            tokens_seen=train_state["tokens_seen"],
            last_lr=train_state["scheduler"]["last_lr"],
            reason=choice.reason,
            exact=same_layout and not lacks,
            from_world_size=document["world_size"],
            allowed_changes=allowed,
            load_s=time.perf_counter() - started,
            upgraded_from=document["upgraded_from"],
            lacks=lacks,
            changed=changed,
        )

    # -- saving ---------------------------------------------------------------------------

    def due(self, completed: int) -> bool:
        every = self.settings.save_every
        return self.directory is not None and every is not None and completed % every == 0

    def maybe_kill(self, step: int, during_save: bool) -> None:
        """--inject-kill-at-step S: SIGKILL the chosen rank after S steps (first launch only).

        Before step S runs, or with ``during_save`` while checkpoint step_S is written.
        """
        s = self.settings
        if (
            s.inject_kill_at_step == step
            and s.inject_kill_during_save == during_save
            and self.context.rank == s.inject_kill_rank
            and restart_count() == 0
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    def save(self, engine, completed: int, train_state: dict) -> None:
        """Save after ``completed`` optimizer steps (every rank calls it).

        Blocked time counts the wait for the previous async save too.
        """
        blocked_from = time.perf_counter()
        self.wait()
        with write_errors.one_line_failures(self.target, layout.step_name(completed)):
            self._write(engine, completed, train_state, blocked_from)

    def _write(self, engine, completed: int, train_state: dict, blocked_from: float) -> None:
        started = time.perf_counter()
        tmp = distributed.agree(self.context, lambda: self._make_temporary(completed))
        state.save_rng(tmp, self.context.rank)
        if self.context.is_main:
            extra = {"created_utc": provenance.utc_now(), "grad_scaler": _scaler_state(engine)}
            state.save_train_state(tmp, {**train_state, **extra})
        record = SaveRecord(step=completed, blocked_s=0.0)
        if self.executor is not None:
            future = self.backend.save(engine, tmp, self.context, True, self.group)
            self.pending = self.executor.submit(self._finish, future, tmp, record, started)
        else:
            self.backend.save(engine, tmp, self.context)
            self.maybe_kill(completed, during_save=True)
            distributed.barrier(self.context)
            self._publish(tmp, record, started)
        record.blocked_s = time.perf_counter() - blocked_from
        self.saves.append(record)

    def _make_temporary(self, step: int) -> Path:
        final = self.target / layout.step_name(step)
        if final.exists():
            raise UsageError(
                f"checkpoint.dir: {final} already exists and is never overwritten; "
                "resume from it (--resume latest) or use another --checkpoint-dir"
            )
        tmp = self.target / layout.temporary_name(step)
        tmp.mkdir(parents=True)
        return tmp

    def _finish(self, future, tmp: Path, record: SaveRecord, started: float) -> None:
        """Background: wait for this rank's write, then for every rank's, then publish."""
        if future is not None:
            future.result()
        if self.group is not None:
            dist.barrier(group=self.group)
        self._publish(tmp, record, started)

    def _publish(self, tmp: Path, record: SaveRecord, started: float) -> None:
        if self.context.is_main:
            train_state = state.load_train_state(tmp)
            document = meta.build(
                tmp,
                train_state,
                self.config,
                self.context.world_size,
                self.backend.name,
                versions(),
            )
            write_atomic(tmp / layout.METADATA, _json(document))
            summary.write(tmp, document, layout.step_name(record.step))
            final = layout.publish(tmp, record.step)
            layout.write_latest(self.target, record.step)
            layout.prune(self.target, self.settings.keep_last)
            record.path = str(final)
            record.bytes = sum(f["bytes"] for f in document["files"].values())
            self.notify_saved(record)
        record.total_s = time.perf_counter() - started

    def notify_saved(self, record: SaveRecord) -> None:
        """``mtb_checkpoint_saved``, through the run's observers where it has them (a
        failing observer is recorded and the run goes on)."""
        observers = self.context.observers
        if observers is None:
            self.pm.hook.mtb_checkpoint_saved(context=self.context, checkpoint=record)
        else:
            observers.call("mtb_checkpoint_saved", context=self.context, checkpoint=record)

    def wait(self) -> None:
        """Block until the pending background save is published (its error re-raised)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            step = layout.step_name(self.saves[-1].step)
            with write_errors.one_line_failures(self.target, step):
                pending.result()

    def close(self) -> None:
        """Await the last save and stop the background writer."""
        waited_from = time.perf_counter()
        self.wait()
        self.final_wait_s = time.perf_counter() - waited_from
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        if self.group is not None:
            dist.destroy_process_group(self.group)
            self.group = None

    def summary(self) -> dict:
        return {
            "directory": str(self.directory) if self.directory else None,
            "backend": self.backend.name,
            "async_save": self.settings.async_save,
            "abandoned": self.abandoned,
            "cleared": self.cleared,
            "saves": [attrs.asdict(s) for s in self.saves],
            "blocked_s_total": sum(s.blocked_s for s in self.saves) + self.final_wait_s,
            "final_wait_s": self.final_wait_s,
            "save_s_total": sum(s.total_s or 0.0 for s in self.saves),
        }


def _scaler_state(engine) -> dict | None:
    scaler = getattr(engine, "scaler", None)
    return scaler.state_dict() if scaler is not None else None


def _json(document: dict) -> str:
    import json

    return json.dumps(document, indent=2, sort_keys=True) + "\n"

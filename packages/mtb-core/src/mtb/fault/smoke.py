"""The smoke's shared state: where runs go, the common run flags, one reference run.

Every run is the same small job (tiny preset, 2 ranks, dropout 0.1 so RNG
state matters, a save every 2 of 6 steps, digests recorded), so final
digests of interrupted runs compare bit for bit with one uninterrupted
reference that all scenarios share.
"""

import shutil
import time
from pathlib import Path
from typing import Any

import attrs

from mtb.checkpoint import layout
from mtb.fault import launch
from mtb.fault.evidence import differing, read_json
from mtb.fault.outcome import Outcome

STEPS = 6
SAVE_EVERY = 2
WORLD_SIZE = 2


@attrs.frozen
class Trained:
    """A finished ``mtb run`` launch and the result document it left (if any)."""

    launch: launch.Launch
    result: dict | None

    @property
    def digests(self) -> dict | None:
        return (self.result or {}).get("state_digests")

    @property
    def checkpoint(self) -> dict:
        return (self.result or {}).get("checkpoint") or {}

    @property
    def resumed(self) -> dict:
        return self.checkpoint.get("resumed") or {}

    def saved_steps(self) -> list[int]:
        return [s["step"] for s in self.checkpoint.get("saves", []) if s.get("path")]


@attrs.define
class Smoke:
    workdir: Path
    strategy: str
    timeout_s: float
    pm: Any
    reference_run: Trained | None = None

    def run_flags(self, nproc: int, steps: int, save_every: int | None) -> list[str]:
        flags = ["run", "--strategy", self.strategy, "--nproc-per-node", str(nproc)]
        flags += ["--preset", "tiny", "--steps", str(steps), "--warmup-steps", "1"]
        flags += ["--dropout", "0.1", "--record-digests", "--peak-tflops", "1"]
        flags += ["--timeout", f"{self.timeout_s:g}"]
        return flags + (["--save-every", str(save_every)] if save_every else [])

    def train(
        self,
        outcome: Outcome | None,
        label: str,
        *extra: str,
        nproc: int = WORLD_SIZE,
        steps: int = STEPS,
        save_every: int | None = SAVE_EVERY,
        directory: str = "ckpt",
        file_limit: int | None = None,
    ) -> Trained:
        """``mtb run`` of the common job into ``directory`` of the scenario's folder."""
        cwd = self.folder(outcome.name if outcome else "reference")
        output = f"{label}.json"
        args = [*self.run_flags(nproc, steps, save_every), "--checkpoint-dir", directory]
        done = self.mtb(outcome, label, [*args, "--output", output, *extra], file_limit)
        return Trained(done, read_json(cwd / output))

    def mtb(
        self, outcome: Outcome | None, label: str, args: list[str], file_limit: int | None = None
    ) -> launch.Launch:
        """Any ``mtb`` command in the scenario's folder, under a limit a bit above the run's."""
        cwd = self.folder(outcome.name if outcome else "reference")
        done = launch.mtb(label, args, cwd, self.timeout_s + 30, file_limit)
        if outcome is not None:
            outcome.launches.append(done.evidence())
        return done

    def folder(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def reference(self) -> Trained:
        """The uninterrupted run every scenario compares with (run once, on first use)."""
        if self.reference_run is None:
            self.reference_run = self.train(None, "reference")
        return self.reference_run

    def reference_ok(self, outcome: Outcome) -> bool:
        ref = self.reference()
        return outcome.check(
            "the uninterrupted reference run finished with digests",
            ref.launch.returncode == 0 and ref.digests,
            {"exit_code": ref.launch.returncode},
        )

    def reshard_refusal(self) -> str | None:
        """Why the strategy's checkpoint backend cannot change world size (None: it can)."""
        from mtb import config as config_mod
        from mtb.checkpoint.lifecycle import backend_for

        config = config_mod.resolve(flags={"strategy": self.strategy, "preset": "tiny"})
        strategy = self.pm.registry("strategy").get(self.strategy)
        return backend_for(self.pm, config, strategy).reshard_refusal

    def reference_dir(self) -> Path:
        return self.folder("reference") / "ckpt"

    def copy_reference(self, outcome: Outcome, steps: list[int], name: str = "ckpt") -> Path:
        """The reference's READY checkpoints ``steps`` in the scenario's ``name``, latest last.

        The copy is byte for byte what the reference directory held right
        after its save of ``steps[-1]``.
        """
        target = self.folder(outcome.name) / name
        target.mkdir()
        for step in steps:
            name = layout.step_name(step)
            shutil.copytree(self.reference_dir() / name, target / name)
        layout.write_latest(target, steps[-1])
        return target

    def same_as_reference(self, outcome: Outcome, what: str, run: Trained) -> bool:
        ref = self.reference().digests
        differ = differing(run.digests, ref) if run.digests != ref else []
        return outcome.check(
            f"{what}: final state digests equal the uninterrupted reference's",
            not differ,
            {"differing": differ, "digests": run.digests},
        )


def run_scenario(smoke: Smoke, name: str, scenario) -> Outcome:
    """One scenario; an unexpected error fails it with the error rather than the smoke."""
    outcome = Outcome(name)
    started = time.perf_counter()
    try:
        scenario(smoke, outcome)
    except Exception as error:  # a scenario bug or a missing file is a failed scenario
        outcome.error = f"{type(error).__name__}: {error}"
    outcome.seconds = time.perf_counter() - started
    return outcome

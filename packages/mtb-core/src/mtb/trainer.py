"""The measured training loop: warmup, measured steps, one trial at a time.

Each trial rebuilds model, engine and data so trials are independent; every
number a trial records is this rank's own. Timings are reduced across ranks
once per trial, after the loop; the only collective the loop adds is one
small all_reduce per step that carries every rank's loss and gradient norm
(for the non-finite check and, with sharded gradients, the whole model's norm).
"""

import functools
import math
import resource
import time

import attrs
import torch

from mtb import data_sources
from mtb.activations import SavedActivations
from mtb.checkpoint.session import CheckpointSession
from mtb.clock import PhaseClock
from mtb.compiling import CompileTimer, check_measured, compile_blocks
from mtb.data import GlobalBatch
from mtb.distributed import rank_rows
from mtb.engine import StepHooks, make_optimizer, norm_shard
from mtb.errors import MtbError, NonFiniteError, RunFailed, one_line
from mtb.launch import LaunchTimeout
from mtb.metrics import StepMetrics
from mtb.model import GPT
from mtb.moe import take_step
from mtb.observers import Observers
from mtb.profiling.ranges import ranges
from mtb.schedule import lr_at
from mtb.seeding import seed_model_init, seed_training


@attrs.define
class TrialRecord:
    """One rank's raw numbers for one trial (every step, warmup included)."""

    rank: int
    steps: list[StepMetrics]
    model_state_bytes: dict
    memory: dict
    details: dict
    #: checkpoint saves and resume of this rank (None without checkpointing)
    checkpoint: dict | None = None
    #: digests of the final state (None unless checkpoint.record_digests)
    digests: dict | None = None
    #: what the engine measured on this rank over the measured steps (a pipeline's bubble)
    engine_metrics: dict = attrs.Factory(dict)


def build_model(context) -> GPT:
    """The GPT of the config, initialised from the seed alone, on the run's device.

    Every strategy wraps what this returns, so ``--compile`` is applied here:
    after activation checkpointing and before any wrapper or sharding.
    """
    seed_model_init(context)
    training = context.config.training
    model = GPT(context.config.model)
    model.set_activation_checkpointing(training.activation_checkpointing)
    if training.compile:
        compile_blocks(model)
    return model.to(context.device)


def memory_stats(device: torch.device) -> dict:
    """Peak memory of this process: CUDA allocator figures and CPU peak RSS."""
    stats = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if device.type == "cuda":
        stats.update(
            cuda_max_allocated_bytes=torch.cuda.max_memory_allocated(device),
            cuda_max_reserved_bytes=torch.cuda.max_memory_reserved(device),
            cuda_num_alloc_retries=torch.cuda.memory_stats(device).get("num_alloc_retries", 0),
        )
    return stats


class Trainer:
    """Runs trials of one strategy on this rank and records their numbers."""

    def __init__(self, context, strategy, pm):
        self.context = context
        self.strategy = strategy
        self.pm = pm
        self.observers = context.observers = Observers(pm, context.rank)
        self.training = context.config.training
        self.range = ranges(False)
        self.moe_layers: list = []
        #: the step whose forward-backward is metered for activation memory (eager only)
        self.metered_step: int | None = None
        self.activation_bytes: int | None = None

    def data(self) -> GlobalBatch:
        """This rank's batches from the run's data source (``data.source``)."""
        source = data_sources.resolve(self.pm, self.context.config.data.source)
        return source.sampler(self.context.config, self.context)

    def run_trial(self, trial: int, on_step=None, profiler=None) -> TrialRecord:
        """One trial; ``profiler`` (a profiler session) is stepped after every step."""
        self.context.trial = trial
        self.range = ranges(profiler is not None)
        if self.context.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.context.device)
        model = build_model(self.context)
        self.moe_layers = model.moe_layers()
        engine = self.set_up(model)
        self.context.engine = engine
        seed_training(self.context)  # before a resume restores the saved RNG states
        session = CheckpointSession(self.context, self.strategy, self.pm, engine)
        data = self.data()
        clock = PhaseClock(self.context.device)
        self.observers.call("mtb_trial_start", context=self.context)
        steps = []
        start = session.start_step
        self.metered_step = None if self.training.compile else start
        self.activation_bytes = None
        warmup = min(self.training.warmup_steps, self.training.steps - start - 1)
        with CompileTimer(self.training.compile) as compiling:
            for step in range(start, self.training.steps):
                session.before_step(step)
                metrics = self.step(engine, data, clock, step, warmup=step < start + warmup)
                metrics.compile_ms = compiling.take()
                steps.append(metrics)
                self.observers.call("mtb_step_end", context=self.context, metrics=metrics)
                session.after_step(step + 1, metrics)
                if on_step is not None:
                    on_step(metrics)
                if profiler is not None:
                    profiler.step()
        check_measured(steps)
        checkpoint, digests = session.finish()
        engine_metrics = engine.rank_metrics(sum(s.warmup for s in steps))
        state_bytes = self.probe_state_bytes(engine, data, self.training.steps)
        memory = memory_stats(self.context.device) | {
            "activation_saved_bytes": self.activation_bytes
        }
        return TrialRecord(
            self.context.rank,
            steps,
            state_bytes,
            memory,
            engine.details(),
            checkpoint,
            digests,
            engine_metrics,
        )

    def set_up(self, model):
        """The strategy's engine for ``model``; a setup that raises names strategy and plugin."""
        try:
            return self.strategy.setup(
                model, lambda params: make_optimizer(params, self.training), self.context
            )
        except (MtbError, LaunchTimeout):  # already said for the user, or the deadline
            raise
        except Exception as error:
            name = self.context.config.strategy
            plugin = self.pm.registry("strategy").items[name].plugin
            raise RunFailed(
                f"strategy {name!r} of plugin {plugin} failed in setup: {one_line(error)}"
            ) from error

    def batches(self, data, step: int) -> list:
        """The micro-batches of ``step`` on this rank."""
        return [data.batch(step, micro) for micro in range(self.training.grad_accum_steps)]

    def step(self, engine, data, clock: PhaseClock, step: int, warmup: bool) -> StepMetrics:
        started = time.perf_counter()
        clock.start()
        with self.range("mtb.data"):
            batches = self.batches(data, step)
        clock.mark("data")
        hooks = StepHooks(range=self.range, on_loss=functools.partial(self.maybe_poison, step))
        loss = self.forward_backward(engine, batches, hooks, step)
        clock.mark("forward_backward")
        with self.range("mtb.optimizer"):
            info, lr, loss_value = self.optimizer_phase(engine, loss, step)
        clock.mark("optimizer")
        phases = clock.phases_ms()
        step_ms = (time.perf_counter() - started) * 1000.0
        return StepMetrics(
            step=step,
            warmup=warmup,
            data_ms=phases.get("data", 0.0),
            forward_backward_ms=phases.get("forward_backward", 0.0),
            optimizer_ms=phases.get("optimizer", 0.0),
            step_ms=step_ms,
            loss=loss_value,
            tokens=sum(batch.tokens for batch in batches),
            lr=lr,
            grad_norm=info.grad_norm,
            clipped=info.clipped,
            skipped=info.skipped,
            gradient_syncs=info.gradient_syncs,
            moe=take_step(self.moe_layers),
        )

    def forward_backward(self, engine, batches: list, hooks: StepHooks, step: int):
        """The engine's forward-backward; the metered step also records its saved activations."""
        if step != self.metered_step:
            return engine.forward_backward(batches, hooks)
        with SavedActivations() as saved:
            loss = engine.forward_backward(batches, hooks)
        self.activation_bytes = saved.peak_bytes
        return loss

    def optimizer_phase(self, engine, loss: torch.Tensor, step: int):
        """Learning rate, clipping, the finiteness check and the optimizer step."""
        lr = lr_at(step, self.training, self.training.steps)
        engine.set_lr(lr)
        max_norm = self.training.max_grad_norm
        raw_norm = engine.grad_norm()  # every step, clipping or not: one fused norm
        loss_value, norm = self.agree_finite(step, loss, raw_norm)
        info = engine.optimizer_step(max_norm, norm)
        if norm is not None:
            info.grad_norm, info.clipped = norm, max_norm is not None and norm > max_norm
        return info, lr, loss_value

    def agree_finite(self, step: int, loss: torch.Tensor, raw_norm):
        """This rank's loss and the model's gradient norm, checked on every rank.

        One all_reduce (and the step's only host sync) carries every rank's
        loss and gradient norm; a sharded norm travels as this rank's shard
        norm and is combined here. A non-finite norm is how non-finite
        gradients show.
        """
        local, sharded = norm_shard(raw_norm)
        loss = loss.detach().float().reshape(())
        row = torch.stack([loss, loss.new_zeros(()) if local is None else local.float()])
        table = rank_rows(self.context, row)
        if sharded:
            table[:, 1] = table[:, 1].square().sum().sqrt()
        losses, norms = zip(*table.tolist(), strict=True)
        self.check_finite(step, losses, None if raw_norm is None else norms)
        norm = None if raw_norm is None else norms[self.context.rank]
        return losses[self.context.rank], norm

    def maybe_poison(self, step: int, loss: torch.Tensor, micro: int) -> torch.Tensor:
        """--inject-nan-at-step: a NaN loss on the chosen rank, for fault tests."""
        training = self.training
        if (step, micro, self.context.rank) == (
            training.inject_nan_at_step,
            0,
            training.inject_nan_rank,
        ):
            return loss * float("nan")
        return loss

    def check_finite(self, step: int, losses, norms) -> None:
        """Stop every rank alike when any rank's loss or gradient norm is non-finite.

        Raises the same error on every rank before any optimizer or scheduler
        step, so parameters stay as they were after the last good step. A
        non-finite loss is the cause named: the gradients it spreads to (on
        every rank, once synchronised) are named only when every loss was finite.
        """
        bad_loss = [rank for rank, loss in enumerate(losses) if not math.isfinite(loss)]
        bad_grads = [rank for rank, norm in enumerate(norms or ()) if not math.isfinite(norm)]
        if bad_loss:
            what = f"loss on rank(s) {', '.join(map(str, bad_loss))}"
        elif bad_grads:
            what = f"gradients on rank(s) {', '.join(map(str, bad_grads))}"
        else:
            return
        raise NonFiniteError(f"non-finite {what} at step {step}; no optimizer step was taken")

    def probe_state_bytes(self, engine, data, step: int) -> dict:
        """Model-state bytes with gradients and optimizer state populated.

        Runs one extra, untimed step's forward/backward after the measured steps
        so gradients exist when counted; they are dropped again afterwards.
        """
        engine.forward_backward(self.batches(data, step), StepHooks())
        counted = engine.model_state_bytes()
        engine.zero_grad()
        return {**attrs.asdict(counted), "total": counted.total}

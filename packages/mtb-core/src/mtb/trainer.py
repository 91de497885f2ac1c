"""The measured training loop: warmup, measured steps, one trial at a time.

Each trial rebuilds model, engine and data so trials are independent; every
number a trial records is this rank's own. Cross-rank reduction happens once
per trial, after the loop, so measuring adds no collective to a step.
"""

import resource
import time

import attrs
import torch

from mtb.clock import PhaseClock
from mtb.data import SyntheticTokens
from mtb.engine import make_optimizer
from mtb.metrics import StepMetrics
from mtb.model import GPT


@attrs.define
class TrialRecord:
    """One rank's raw numbers for one trial (every step, warmup included)."""

    rank: int
    steps: list[StepMetrics]
    model_state_bytes: dict
    memory: dict


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)


def build_model(context) -> torch.nn.Module:
    """The GPT of the config, initialised from the seed alone, on the run's device."""
    seed_everything(context.config.data.seed)
    return GPT(context.config.model).to(context.device)


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

    def __init__(self, context, strategy, hooks):
        self.context = context
        self.strategy = strategy
        self.hooks = hooks
        self.training = context.config.training

    def data(self) -> SyntheticTokens:
        cfg = self.context.config
        return SyntheticTokens(
            vocab_size=cfg.model.vocab_size,
            seq_len=cfg.model.seq_len,
            micro_batch_size=cfg.data.micro_batch_size,
            seed=cfg.data.seed,
            dp_rank=self.context.dp_rank,
            device=self.context.device,
        )

    def run_trial(self, trial: int, on_step=None) -> TrialRecord:
        self.context.trial = trial
        if self.context.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.context.device)
        model = build_model(self.context)
        engine = self.strategy.setup(
            model, lambda params: make_optimizer(params, self.training), self.context
        )
        data = self.data()
        clock = PhaseClock(self.context.device)
        self.hooks.mtb_run_start(context=self.context)
        steps = []
        for step in range(self.training.warmup_steps + self.training.steps):
            metrics = self.step(engine, data, clock, step)
            steps.append(metrics)
            self.hooks.mtb_step_end(context=self.context, metrics=metrics)
            if on_step is not None:
                on_step(metrics)
        state_bytes = self.probe_state_bytes(engine, data, len(steps))
        return TrialRecord(self.context.rank, steps, state_bytes, memory_stats(self.context.device))

    def step(self, engine, data, clock: PhaseClock, step: int) -> StepMetrics:
        accum = self.training.grad_accum_steps
        started = time.perf_counter()
        clock.start()
        loss_sum = torch.zeros((), device=self.context.device)
        tokens = 0
        for micro in range(accum):
            batch = data.batch(step, micro)
            tokens += batch.tokens
            clock.mark("data")
            with engine.sync_context(is_last_micro_batch=micro == accum - 1):
                loss = engine.forward(batch)
                engine.backward(loss / accum)
            loss_sum += loss.detach()
            clock.mark("forward_backward")
        engine.optimizer_step()
        clock.mark("optimizer")
        phases = clock.phases_ms()
        step_ms = (time.perf_counter() - started) * 1000.0
        return StepMetrics(
            step=step,
            warmup=step < self.training.warmup_steps,
            data_ms=phases.get("data", 0.0),
            forward_backward_ms=phases.get("forward_backward", 0.0),
            optimizer_ms=phases.get("optimizer", 0.0),
            step_ms=step_ms,
            loss=loss_sum.item() / accum,
            tokens=tokens,
        )

    def probe_state_bytes(self, engine, data, step: int) -> dict:
        """Model-state bytes with gradients and optimizer state populated.

        Runs one extra, untimed forward/backward after the measured steps so
        gradients exist when counted; they are dropped again afterwards.
        """
        batch = data.batch(step, 0)
        with engine.sync_context(is_last_micro_batch=True):
            engine.backward(engine.forward(batch))
        counted = engine.model_state_bytes()
        engine.zero_grad()
        return {**attrs.asdict(counted), "total": counted.total}

"""The DeepSpeed engine (imports deepspeed; loaded only when a zero* run starts)."""

import contextlib
import json
import os

from mtb.api import ConfigError, Engine, ModelStateBytes, StepInfo, SyncCounter

#: deepspeed.comm functions that reduce gradients; counted while backward runs
REDUCTIONS = (
    "all_reduce",
    "reduce",
    "reduce_scatter_fn",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "all_to_all_single",
)


def generated_config(context, stage: int) -> dict:
    """The DeepSpeed config mtb derives from the run config."""
    cfg = context.config
    training = cfg.training
    return {
        "train_micro_batch_size_per_gpu": cfg.data.micro_batch_size,
        "gradient_accumulation_steps": training.grad_accum_steps,
        "train_batch_size": cfg.data.micro_batch_size
        * training.grad_accum_steps
        * context.world_size,
        # 0: shard every parameter; DeepSpeed's default keeps small ones replicated
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}
        if stage == 3
        else {"stage": stage},
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": training.lr,
                "weight_decay": training.weight_decay,
                "torch_adam": True,
            },
        },
        "bf16": {"enabled": training.precision == "bf16"},
        "fp16": {"enabled": training.precision == "fp16", "loss_scale": 0},
        "gradient_clipping": training.max_grad_norm or 0.0,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def merge(base: dict, override: dict) -> dict:
    """``override`` merged over ``base``, recursively for nested tables."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def user_config(path: str | None) -> dict:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
    except OSError as error:
        raise ConfigError(
            "strategy_options.deepspeed_config", f"cannot read {path}: {error.strerror}"
        ) from None
    except json.JSONDecodeError as error:
        raise ConfigError(
            "strategy_options.deepspeed_config", f"{path} is not valid JSON: {error}"
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigError("strategy_options.deepspeed_config", f"{path} must hold a JSON object")
    return loaded


def validated(config: dict):
    """DeepSpeed's own parse of the merged config; its complaint becomes one line."""
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        return DeepSpeedConfig(config)
    except Exception as error:  # DeepSpeed raises assertion and pydantic errors
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            "strategy_options.deepspeed_config", f"DeepSpeed rejected the merged config: {detail}"
        ) from None


@contextlib.contextmanager
def counting(counter: SyncCounter):
    """Count deepspeed.comm reductions issued inside the block."""
    import deepspeed.comm as ds_comm

    originals = {name: getattr(ds_comm, name) for name in REDUCTIONS if hasattr(ds_comm, name)}

    def wrap(function):
        def counted(*args, **kwargs):
            counter.issued()
            return function(*args, **kwargs)

        return counted

    for name, function in originals.items():
        setattr(ds_comm, name, wrap(function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(ds_comm, name, function)


class ZeroEngine(Engine):
    """DeepSpeed owns backward, accumulation, clipping and the optimizer step."""

    def __init__(self, ds_engine, context, stage: int, ds_config: dict):
        self.model = ds_engine
        self.optimizer = ds_engine.optimizer
        self.context = context
        self.stage = stage
        self.ds_config = ds_config
        self.counter = SyncCounter()
        self.last_micro_batch = True

    @classmethod
    def build(cls, model, context, stage: int):
        if context.device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        deepspeed.init_distributed(dist_backend=context.backend)  # joins the existing group
        options = context.config.strategy_options
        ds_config = merge(
            generated_config(context, stage), user_config(options.get("deepspeed_config"))
        )
        validated(ds_config)
        engine, *_ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config
        )
        return cls(engine, context, stage, ds_config)

    def details(self) -> dict:
        requested = self.context.config.training.gradient_sync_mode
        return {
            "gradient_sync_mode": {"requested": requested, "resolved": "deepspeed"},
            "deepspeed_config": self.ds_config,
        }

    def autocast(self):
        return contextlib.nullcontext()  # DeepSpeed casts the module itself

    def sync_context(self, is_last_micro_batch: bool):
        """Tell DeepSpeed where the accumulation boundary is, rather than let it count."""
        self.last_micro_batch = is_last_micro_batch
        self.model.set_gradient_accumulation_boundary(is_last_micro_batch)
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        """The trainer already divided by the accumulation steps; DeepSpeed must not again."""
        self.counter.begin()
        with counting(self.counter):
            self.model.backward(loss, scale_wrt_gas=False)
        self.counter.end()
        if not self.last_micro_batch:
            self.model.step()  # DeepSpeed's micro-step bookkeeping; no optimizer step

    def grad_norm(self):
        return None  # computed by DeepSpeed inside its step

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def optimizer_step(self, max_grad_norm=None, grad_norm=None) -> StepInfo:
        self.model.step()
        norm = self.model.get_global_grad_norm()
        norm = None if norm is None else float(norm)
        clipped = bool(max_grad_norm and norm is not None and norm > max_grad_norm)
        return StepInfo(
            grad_norm=norm,
            clipped=clipped,
            skipped=not self.model.was_step_applied(),
            gradient_syncs=self.counter.take(),
        )

    def zero_grad(self) -> None:
        self.model.zero_grad()

    def full_model_state(self) -> dict:
        from deepspeed.utils import safe_get_full_fp32_param

        full = {}
        for name, param in self.model.module.named_parameters(remove_duplicate=False):
            value = safe_get_full_fp32_param(param)
            full[name] = value.detach().cpu().clone() if value is not None else None
        return full

    def model_state_bytes(self) -> ModelStateBytes:
        from mtb_strategies.zero_memory import zero_state_bytes

        return zero_state_bytes(self.model, self.stage)

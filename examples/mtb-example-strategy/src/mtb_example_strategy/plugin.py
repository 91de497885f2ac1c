"""The ``example`` plugin: registers the ``example-localsgd`` strategy.

Local SGD (Stich, "Local SGD Converges Fast and Communicates Little", 2019;
Lin et al., "Don't Use Large Mini-Batches, Use Local SGD", 2020): every rank
trains its own replica on its own data shard and takes its own optimizer
step; every ``sync_every`` steps the replicas' parameters are averaged with
one all-reduce. Between syncs no gradient is communicated at all.

This module is what mtb imports to list plugins, so it must not import
torch; the engine (which does) is imported inside ``setup``.
"""

from mtb.api import Strategy, StrategyOption, hookimpl

#: a per-plugin option: ``mtb run --localsgd-sync-every 4``, or
#: ``[strategy_options] localsgd_sync_every = 4`` in a run file
SYNC_EVERY = StrategyOption(
    "localsgd_sync_every",
    int,
    2,
    "example-localsgd: optimizer steps between two parameter averages",
    unit="steps",
)


class LocalSGDStrategy(Strategy):
    name = "example-localsgd"
    description = "Local SGD: local optimizer steps, parameters averaged every N steps"
    options = (SYNC_EVERY,)

    def check(self, config, device_type: str) -> None:
        super().check(config, device_type)
        every = self.resolve_options(config.strategy_options)[SYNC_EVERY.name]
        if every < 1:
            from mtb.api import ConfigError

            raise ConfigError(f"strategy_options.{SYNC_EVERY.name}", f"{every}: must be 1 or more")

    def setup(self, model, make_optimizer, context):
        from mtb_example_strategy.engine import LocalSGDEngine, broadcast_parameters

        every = self.resolve_options(context.config.strategy_options)[SYNC_EVERY.name]
        # Every rank must start from the same replica; ranks already build the
        # model from the same seed, broadcasting makes it a guarantee.
        broadcast_parameters(model)
        return LocalSGDEngine(model, make_optimizer(model.parameters()), context, sync_every=every)


@hookimpl
def mtb_register_strategies(register):
    register(LocalSGDStrategy())

"""The public API: what plugins, sibling packages, examples and benchmarks may import.

Everything a plugin builds on is named in ``__all__``; every other module of
``mtb`` is internal and may change between releases (a test keeps the other
packages to this module). Importing it stays cheap: names that need torch
(engines, the model, process groups) are imported on first use.

Contracts: Strategy, StrategyOption, Option (a setting of any plugin), Layout (the
parallel layout a strategy checks and builds its mesh from), Engine
(with StepHooks, StepInfo, ModelStateBytes; CountedSyncEngine and SyncCounter to
report gradient synchronisations), CheckpointBackend, Profiler (with
ProfileSession), Reporter, MetricLogger (with LoggerRun and MetricSession), hookimpl;
the MoE router and layer (:mod:`mtb.moe`); the model's parameter and FLOP counts
(:func:`parameter_count`, :func:`rank_parameter_count`, :func:`expert_parameter_count`,
:func:`flops_per_token`); token files (:mod:`mtb.token_files`: open and
check a nanoGPT or Megatron file, and the digests of what was read).
Runtime services: result documents (:func:`result_document`,
:func:`document_provenance`, :func:`default_output`, :func:`write_result`,
:func:`write_atomic`, :func:`append_whole`, :func:`publish`, failure
documents), testing a plugin (:func:`mtb_plugin`), launching (:func:`run_function`,
the launch options, the busy-GPU guard :func:`refuse_busy_gpus`) and the helpers a
command needs around them.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from mtb import PLUGIN_API_VERSION
from mtb.checkpoint.backend import CheckpointBackend
from mtb.context import RunContext
from mtb.errors import ConfigError, MtbError, PluginError, RunFailed, UsageError
from mtb.hookspecs import hookimpl
from mtb.layout import Layout
from mtb.metric_logger import LoggerRun, MetricLogger, MetricSession
from mtb.options import Option
from mtb.profiling.protocol import Profiler, ProfileSession
from mtb.reporting import Reporter, append_whole, publish, write_atomic
from mtb.strategy import Strategy, StrategyOption

if TYPE_CHECKING:
    from mtb import distributed, moe, token_files
    from mtb.checkpoint.lifecycle import SaveRecord
    from mtb.cli.config_options import LAUNCH as LAUNCH_SECTION
    from mtb.cli.config_options import launch_options, option_for, split_launch
    from mtb.clock import PhaseClock
    from mtb.config import SYNC_MODES, LaunchConfig, setting
    from mtb.config import resolve as resolve_config
    from mtb.config import structure as config_from_dict
    from mtb.config import to_dict as config_to_dict
    from mtb.config import to_toml as config_to_toml
    from mtb.console import plain_console, stdout
    from mtb.data import Batch, GlobalBatch, SyntheticTokens, TokenWindows
    from mtb.documents import (
        SCHEMA_VERSION,
        default_output,
        document_provenance,
        plugin_list,
        result_document,
        write_result,
    )
    from mtb.engine import Engine, ModelStateBytes, StepHooks, StepInfo, cpu_copy, total_norm
    from mtb.gpu_guard import check as refuse_busy_gpus
    from mtb.launch import LaunchTimeout, node_provenance, run_function
    from mtb.launcher import launch as run_training
    from mtb.layout import microbatches_of as pipeline_microbatches
    from mtb.layout import stage_layers
    from mtb.memory import format_size
    from mtb.metrics import StepMetrics, above_peak, summarize
    from mtb.model import (
        GPT,
        expert_parameter_count,
        flops_per_token,
        parameter_count,
        rank_parameter_count,
    )
    from mtb.output_paths import check_file as check_output
    from mtb.plugins import build_plugin_manager, get_plugin_manager
    from mtb.profiling.trace import analyse as analyse_trace
    from mtb.profiling.trace import load as load_trace
    from mtb.provenance import torch_info, utc_now
    from mtb.results import STATUSES, error_class, failure_document, failure_status, from_document
    from mtb.sync_counting import CountedSyncEngine, SyncCounter
    from mtb.testing import PluginRun, PluginRunner, mtb_plugin

#: the rest, imported on first use so that a plugin's import stays cheap (torch, rich,
#: the launcher): public name -> (module, attribute, or None for the module itself)
_LAZY = {
    "Engine": ("mtb.engine", "Engine"),
    "CountedSyncEngine": ("mtb.sync_counting", "CountedSyncEngine"),
    "SyncCounter": ("mtb.sync_counting", "SyncCounter"),
    "StepInfo": ("mtb.engine", "StepInfo"),
    "StepHooks": ("mtb.engine", "StepHooks"),
    "ModelStateBytes": ("mtb.engine", "ModelStateBytes"),
    "cpu_copy": ("mtb.engine", "cpu_copy"),
    "refuse_busy_gpus": ("mtb.gpu_guard", "check"),
    "total_norm": ("mtb.engine", "total_norm"),
    "LAUNCH_SECTION": ("mtb.cli.config_options", "LAUNCH"),
    "launch_options": ("mtb.cli.config_options", "launch_options"),
    "option_for": ("mtb.cli.config_options", "option_for"),
    "split_launch": ("mtb.cli.config_options", "split_launch"),
    "PhaseClock": ("mtb.clock", "PhaseClock"),
    "pipeline_microbatches": ("mtb.layout", "microbatches_of"),
    "stage_layers": ("mtb.layout", "stage_layers"),
    "SYNC_MODES": ("mtb.config", "SYNC_MODES"),
    "LaunchConfig": ("mtb.config", "LaunchConfig"),
    "setting": ("mtb.config", "setting"),
    "resolve_config": ("mtb.config", "resolve"),
    "config_to_dict": ("mtb.config", "to_dict"),
    "config_from_dict": ("mtb.config", "structure"),
    "config_to_toml": ("mtb.config", "to_toml"),
    "plain_console": ("mtb.console", "plain_console"),
    "stdout": ("mtb.console", "stdout"),
    "SCHEMA_VERSION": ("mtb.documents", "SCHEMA_VERSION"),
    "default_output": ("mtb.documents", "default_output"),
    "document_provenance": ("mtb.documents", "document_provenance"),
    "plugin_list": ("mtb.documents", "plugin_list"),
    "result_document": ("mtb.documents", "result_document"),
    "write_result": ("mtb.documents", "write_result"),
    "LaunchTimeout": ("mtb.launch", "LaunchTimeout"),
    "run_function": ("mtb.launch", "run_function"),
    "run_training": ("mtb.launcher", "launch"),
    "format_size": ("mtb.memory", "format_size"),
    "above_peak": ("mtb.metrics", "above_peak"),
    "summarize": ("mtb.metrics", "summarize"),
    "check_output": ("mtb.output_paths", "check_file"),
    "build_plugin_manager": ("mtb.plugins", "build_plugin_manager"),
    "get_plugin_manager": ("mtb.plugins", "get_plugin_manager"),
    "analyse_trace": ("mtb.profiling.trace", "analyse"),
    "load_trace": ("mtb.profiling.trace", "load"),
    "torch_info": ("mtb.provenance", "torch_info"),
    "utc_now": ("mtb.provenance", "utc_now"),
    "STATUSES": ("mtb.results", "STATUSES"),
    "error_class": ("mtb.results", "error_class"),
    "failure_document": ("mtb.results", "failure_document"),
    "failure_status": ("mtb.results", "failure_status"),
    "from_document": ("mtb.results", "from_document"),
    "distributed": ("mtb.distributed", None),
    "moe": ("mtb.moe", None),
    "token_files": ("mtb.token_files", None),
    "node_provenance": ("mtb.launch", "node_provenance"),
    "GPT": ("mtb.model", "GPT"),
    "parameter_count": ("mtb.model", "parameter_count"),
    "rank_parameter_count": ("mtb.model", "rank_parameter_count"),
    "expert_parameter_count": ("mtb.model", "expert_parameter_count"),
    "flops_per_token": ("mtb.model", "flops_per_token"),
    "SyntheticTokens": ("mtb.data", "SyntheticTokens"),
    "GlobalBatch": ("mtb.data", "GlobalBatch"),
    "TokenWindows": ("mtb.data", "TokenWindows"),
    "Batch": ("mtb.data", "Batch"),
    "StepMetrics": ("mtb.metrics", "StepMetrics"),
    "SaveRecord": ("mtb.checkpoint.lifecycle", "SaveRecord"),
    "mtb_plugin": ("mtb.testing", "mtb_plugin"),
    "PluginRunner": ("mtb.testing", "PluginRunner"),
    "PluginRun": ("mtb.testing", "PluginRun"),
}


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'mtb.api' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value
    return value


#: the contracts, then the runtime services (see the module docstring)
__all__ = [
    "GPT",
    "LAUNCH_SECTION",
    "PLUGIN_API_VERSION",
    "SCHEMA_VERSION",
    "STATUSES",
    "SYNC_MODES",
    "Batch",
    "CheckpointBackend",
    "ConfigError",
    "CountedSyncEngine",
    "Engine",
    "GlobalBatch",
    "LaunchConfig",
    "LaunchTimeout",
    "Layout",
    "LoggerRun",
    "MetricLogger",
    "MetricSession",
    "ModelStateBytes",
    "MtbError",
    "Option",
    "PhaseClock",
    "PluginError",
    "PluginRun",
    "PluginRunner",
    "ProfileSession",
    "Profiler",
    "Reporter",
    "RunContext",
    "RunFailed",
    "SaveRecord",
    "StepHooks",
    "StepInfo",
    "StepMetrics",
    "Strategy",
    "StrategyOption",
    "SyncCounter",
    "SyntheticTokens",
    "TokenWindows",
    "UsageError",
    "above_peak",
    "analyse_trace",
    "append_whole",
    "build_plugin_manager",
    "check_output",
    "config_from_dict",
    "config_to_dict",
    "config_to_toml",
    "cpu_copy",
    "default_output",
    "distributed",
    "document_provenance",
    "error_class",
    "expert_parameter_count",
    "failure_document",
    "failure_status",
    "flops_per_token",
    "format_size",
    "from_document",
    "get_plugin_manager",
    "hookimpl",
    "launch_options",
    "load_trace",
    "moe",
    "mtb_plugin",
    "node_provenance",
    "option_for",
    "parameter_count",
    "pipeline_microbatches",
    "plain_console",
    "plugin_list",
    "publish",
    "rank_parameter_count",
    "refuse_busy_gpus",
    "resolve_config",
    "result_document",
    "run_function",
    "run_training",
    "setting",
    "split_launch",
    "stage_layers",
    "stdout",
    "summarize",
    "token_files",
    "torch_info",
    "total_norm",
    "utc_now",
    "write_atomic",
    "write_result",
]

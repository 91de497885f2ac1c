"""One worker process of ``mtb run``: train, gather, and (rank 0) write the result.

Launched workers are started as ``python -m mtb.lifeline mtb.worker CONFIG.json``;
under a hand-typed ``torchrun -m mtb run`` the CLI calls :func:`run` in-process.
"""

import contextlib
import json
import os
import socket
import sys

from mtb import (
    calibration,
    compiling,
    components,
    distributed,
    memory,
    metric_logging,
    observers,
    provenance,
    run_reports,
)
from mtb import config as config_mod
from mtb.checkpoint.state import combine_digests
from mtb.documents import document_provenance, plugin_list, result_document, write_result
from mtb.errors import PluginsFailed, Preempted, one_line, say
from mtb.launch import entry, node_provenance, record_error
from mtb.metrics import gpu_peak_flops
from mtb.model import (
    expert_parameter_count,
    flops_per_token,
    largest_linear,
    matmul_parameter_count,
    parameter_count,
    rank_parameter_count,
)
from mtb.preemption import PREEMPTION_EXIT
from mtb.profiling import run as profiling
from mtb.registry import call_with
from mtb.results import (
    RunResult,
    document_kind,
    reduce_trial,
    summarize_trials,
    to_document,
)
from mtb.trainer import Trainer


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def peak_flops(context) -> tuple[float | None, str, dict | None]:
    """This rank's device peak for MFU, where the figure came from and how it was measured."""
    cfg = context.config
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12, "user", None
    if context.device.type == "cuda":
        import torch

        name = torch.cuda.get_device_name(context.device)
        peak = gpu_peak_flops(name, cfg.training.precision)
        return peak, f"gpu-table:{name}" if peak else f"unknown-gpu:{name}", None
    tokens = cfg.data.micro_batch_size * cfg.model.seq_len
    measured = calibration.measure(largest_linear(cfg.model, tokens), cfg.training.precision)
    return measured["flops"], f"measured-cpu-matmul-{measured['dtype']}", measured


@contextlib.contextmanager
def step_progress(context):
    """A rich progress bar over every step of every trial, on rank 0's stderr."""
    if not context.is_main:
        yield lambda metrics: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from mtb.console import stderr

    training, profile = context.config.training, context.config.profile
    total = (training.repeat + (profile.enabled and profile.baseline)) * training.steps
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("training", total=total)

        def advance(metrics):
            bar.update(
                task,
                advance=1,
                description=f"trial {context.trial + 1}/{training.repeat} loss {metrics.loss:.3f}",
            )

        yield advance


def train(context, pm, loggers) -> tuple[list, dict | None]:
    """Every trial on this rank: its TrialRecords, and its profile when profiling.

    After each step the progress bar advances and the metric loggers get it.
    """
    strategy = pm.registry("strategy").get(context.config.strategy)
    strategy.check(context.config, context.device.type)
    strategy.check_layout(context.layout)
    trainer = Trainer(context, strategy, pm)
    with step_progress(context) as advance:

        def on_step(metrics):
            advance(metrics)
            loggers.step(context, metrics)

        if context.config.profile.enabled:
            record, profile = profiling.profiled_trial(trainer, context, pm, on_step)
            return [record], profile
        trials = range(context.config.training.repeat)
        return [trainer.run_trial(i, on_step) for i in trials], None


def assemble(
    context, pm, records_by_rank, peaks, nodes, started, profiles=None, plugin_failures=()
) -> dict:
    """Rank 0: the result document from every rank's records (and profiles)."""
    cfg = context.config
    hostnames = [host for host, _ in peaks]
    peak_values = [p for _, (p, _, _) in peaks]
    peak = sum(peak_values) / len(peak_values) if None not in peak_values else None
    fpt = flops_per_token(cfg.model)
    strategy = pm.registry("strategy").get(cfg.strategy)
    layout = context.layout
    estimate = strategy.state_bytes_estimate(
        rank_parameter_count(cfg.model, layout.tp, layout.pp),
        layout.state_shards,
        cfg.training,
        experts=expert_parameter_count(cfg.model),
        ep=layout.ep,
    )
    trials = [
        reduce_trial(
            i,
            [records_by_rank[r][i] for r in range(context.world_size)],
            hostnames,
            context.world_size,
            fpt,
            peak,
            context.layout,
        )
        for i in range(cfg.training.repeat)
    ]
    plugins = plugin_list(pm)
    allowed = provenance.allowed_registries(cfg.allow_registry)
    prov = document_provenance(plugins, allowed, started=started, nodes=nodes)
    environment = {
        "world_size": context.world_size,
        "layout": context.layout.as_dict(),
        "device": str(context.device.type),
        "backend": context.backend,
        "hostnames": hostnames,
        "torch_threads": torch_threads(),
        "peak_flops_per_device": peak,
        "peak_flops_source": peaks[0][1][1],
        "peak_flops_per_rank": peak_values,
        "peak_flops_measurement": peaks[0][1][2],
        "memory_limit_bytes": memory.current_cap(),
        "malloc_mmap_threshold": os.environ.get(memory.MMAP_THRESHOLD_VARIABLE),
        "compile": compiling.provenance() if cfg.training.compile else None,
    }
    model = {
        "parameters": parameter_count(cfg.model),
        "matmul_parameters": matmul_parameter_count(cfg.model),
        "flops_per_token": fpt,
    }
    profile = None
    if profiles:
        first_trials = [records_by_rank[r][0] for r in range(context.world_size)]
        profile = profiling.profile_part(cfg, context.world_size, first_trials, profiles)
    result = RunResult(
        **result_document(document_kind(cfg), plugins=plugins, provenance=prov),
        config=config_mod.to_dict(cfg),
        config_fingerprint=config_mod.fingerprint(cfg),
        environment=environment,
        model=model,
        trials=trials,
        summary=summarize_trials(trials, estimate),
        strategy_details=records_by_rank[0][0].details,
        checkpoint=checkpoint_record([records_by_rank[r][0] for r in range(context.world_size)]),
        state_digests=digests_of(
            [records_by_rank[r][0].digests for r in range(context.world_size)]
        ),
        profile=profile,
        rows=profiling.rows(profiles) if profiles else None,
        components=components.record(pm, cfg),
        plugin_failures=list(plugin_failures),
        **provenance.evidence_fields(cfg.evidence, prov),
    )
    return to_document(result)


def digests_of(per_rank: list) -> dict | None:
    return None if per_rank[0] is None else combine_digests(per_rank)


def checkpoint_record(records: list) -> dict | None:
    """Rank 0's checkpoint record, with every rank's blocked time and loaded digests."""
    first = records[0].checkpoint
    if first is None:
        return None
    return {
        **first,
        "blocked_s_total_per_rank": [r.checkpoint["blocked_s_total"] for r in records],
        "loaded_digests": digests_of([r.checkpoint["loaded_digests"] for r in records]),
    }


def report(context, pm, document: dict) -> list[str]:
    """Rank 0: the atomic JSON write, the summary table, then reports and observers.

    The result is safe before any plugin sees it: a reporter or an observer
    that raises is one line on stderr, and returned.
    """
    from mtb.console import stdout, summary_table

    written = write_result(pm, document, context.config.output, context.config.overwrite)
    stdout.print(summary_table(document))
    if document["profile"] is not None:
        profiling.write_summaries(document["profile"])
        print(f"profile written to {document['profile']['directory']}", flush=True)
    print(f"result written to {written}", flush=True)
    failures = observers.lines(document["plugin_failures"])
    failures += run_reports.render(pm, document, context.config)
    failures += notify_run_end(context, pm, document)
    for failure in failures:
        say(f"mtb: {failure}")
    return failures


def notify_run_end(context, pm, document: dict) -> list[str]:
    """Each ``mtb_run_end`` implementation, in pluggy's order; a line per one that raised."""
    failures = []
    skipped = {failure["plugin"] for failure in document["plugin_failures"]}
    for impl in reversed(pm.hook.mtb_run_end.get_hookimpls()):
        if impl.plugin_name in skipped:  # its observer hooks failed during the run
            continue
        try:
            call_with(impl, context=context, result=document)
        except Exception as error:
            failures.append(f"mtb_run_end of plugin {impl.plugin_name} failed: {one_line(error)}")
    return failures


def run(config, pm) -> dict | None:
    """Train on this process; rank 0 writes the result and returns it.

    On an error the process group is left alone: the process is about to exit,
    and a closing barrier would wait for ranks that may never reach it.
    """
    context = distributed.setup(config)
    started = provenance.utc_now()
    distributed.barrier(context)
    peak = peak_flops(context)
    with metric_logging.logging_run(context, pm) as loggers:
        records, profile = train(context, pm, loggers)
        records_by_rank = distributed.gather(context, records)
        hooks_failed = observers.merged(distributed.gather(context, context.observers.failures))
        profiles = distributed.gather(context, profile) if profile is not None else None
        peaks = distributed.gather(context, (socket.gethostname(), peak))
        nodes = node_provenance(context)
        document, failures = None, []
        if context.is_main:
            document = assemble(
                context, pm, records_by_rank, peaks, nodes, started, profiles, hooks_failed
            )
            failures = report(context, pm, document)
        loggers.finish(document)
    distributed.teardown(context)
    if failures:
        raise PluginsFailed(
            f"result written to {config.output} and kept; {len(failures)} plugin(s) "
            f"failed, first: {failures[0]}"
        )
    return document


def main(argv: list[str] | None = None) -> int:
    """Entry of a launched worker: ``python -m mtb.worker CONFIG.json``."""
    from mtb.plugins import get_plugin_manager

    path = (argv or sys.argv[1:])[0]
    try:
        with open(path, encoding="utf-8") as handle:
            config = config_mod.structure(json.load(handle))
        run(config, get_plugin_manager().settled())
    except Exception as error:
        if os.environ.get("MTB_DEBUG"):
            raise
        record_error(error)
        return PREEMPTION_EXIT if isinstance(error, Preempted) else 1
    return 0


if __name__ == "__main__":
    entry(main)

"""A profiled run: the unprofiled baseline, the profiled trial, rank 0's summary files.

The baseline trial runs the same steps first without any profiler, so the
summary can state what profiling cost; its numbers are not in the result's
trials, which hold the profiled trial.
"""

import json
from pathlib import Path

from mtb.profiling import markdown
from mtb.profiling.summary import combine, overhead, report_rows
from mtb.reporting import write_atomic


def profile_dir(config) -> Path:
    """Where traces and summaries go: ``profile.dir``, else beside the result file."""
    if config.profile.dir:
        return Path(config.profile.dir)
    output = Path(config.output)
    return output.with_name(f"{output.stem}-profile")


def measured_ms(record) -> list[float]:
    return [s.step_ms for s in record.steps if not s.warmup]


def profiled_trial(trainer, context, pm, on_step) -> tuple:
    """This rank's profiled TrialRecord and its profile (trace analysis, baseline times)."""
    cfg = context.config
    profiler = pm.registry("profiler").get(cfg.profile.profiler)
    baseline = trainer.run_trial(0, on_step) if cfg.profile.baseline else None
    with profiler.session(context, profile_dir(cfg)) as session:
        record = trainer.run_trial(0, on_step, session)
    rank_profile = {
        "trace": str(session.path),
        "analysis": session.summary,
        "baseline_step_ms": None if baseline is None else measured_ms(baseline),
    }
    return record, rank_profile


def profile_part(config, world_size: int, records: list, profiles: list[dict]) -> dict:
    """The result document's ``profile`` object from every rank's profile (rank order)."""
    baselines = [p["baseline_step_ms"] for p in profiles]
    part = {
        "profiler": config.profile.profiler,
        "strategy": config.strategy,
        "world_size": world_size,
        "schedule": {
            "skip_first": config.training.warmup_steps,
            "wait": config.profile.wait_steps,
            "warmup": config.profile.warmup_steps,
            "active": config.profile.active_steps,
        },
        "directory": str(profile_dir(config)),
        "traces": [Path(p["trace"]).name for p in profiles],
        **combine([p["analysis"] for p in profiles], config.profile.top),
    }
    part["overhead"] = overhead(
        list(config.profile.window),
        None if None in baselines else baselines,
        [measured_ms(record) for record in records],
    )
    return part


def rows(profiles: list[dict]) -> list[dict]:
    return report_rows([p["analysis"] for p in profiles])


def write_summaries(part: dict) -> None:
    """profile_summary.json and profile_summary.md in the profile directory (rank 0)."""
    directory = Path(part["directory"])
    write_atomic(directory / "profile_summary.json", json.dumps(part, indent=2) + "\n")
    write_atomic(directory / "profile_summary.md", markdown.render(part) + "\n")

"""One launch of one topology: run it under a deadline, keep its logs, read what it says.

stdout and stderr go straight to files (hashed afterwards), GPU memory is
sampled while it runs, and a launch past its deadline is stopped with its
whole process group (SIGTERM, then SIGKILL), so nothing outlives the command.
"""

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from mtb.api import summarize
from mtb_megatron import command, failures, gpu, intervals, logparse
from mtb_megatron.checkout import Checkout
from mtb_megatron.config import MegatronConfig
from mtb_megatron.topology import Topology

KILL_GRACE_S = 10.0


def _log_record(path: Path) -> dict:
    data = path.read_bytes()
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the launch's process group, SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _execute(argv: list[str], cwd: str, stdout: Path, stderr: Path, timeout_s: float):
    """(exit code, timed out, seconds) of ``argv`` with its output in the two files."""
    env = {**os.environ, **command.ENVIRONMENT}
    started = time.monotonic()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
        try:
            process.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(process)
            timed_out = True
        except BaseException:  # Ctrl-C: never leave the launch behind
            _stop(process)
            raise
    return process.returncode, timed_out, time.monotonic() - started


def metrics(iterations: list[dict], first_line_repeated: bool) -> dict:
    """Summaries of the measured intervals, the last loss, and the run's counters.

    ``first_line_repeated``: the release prints iteration 1 and counts it
    again in the next line (megatron-core 0.16 and later, see ``intervals``).
    """
    steady = intervals.measured(iterations, first_line_repeated)
    counted = intervals.counted(iterations, first_line_repeated)

    def series(key):
        return summarize([r[key] for r in steady if r.get(key) is not None])

    last = iterations[-1] if iterations else {}
    return {
        "log_lines": len(iterations),
        "first_iteration_line": first_line_repeated,
        "measured_log_lines": len(steady),
        "last_iteration": last.get("iteration"),
        "elapsed_ms_per_iteration": series("elapsed_ms_per_iteration"),
        "throughput_tflops_per_gpu": series("throughput_tflops_per_gpu"),
        "lm_loss_last": last.get("lm_loss"),
        "learning_rate_last": last.get("learning_rate"),
        "global_batch_size": last.get("global_batch_size"),
        "skipped_iterations": sum(r.get("skipped_iterations") or 0 for r in counted),
        "nan_iterations": sum(r.get("nan_iterations") or 0 for r in counted),
    }


def memory_by_rank(reports: list[dict]) -> list[dict]:
    """Each reporting rank's peak allocated and reserved CUDA memory (MB), by rank."""
    peaks: dict[int, dict] = {}
    for report in reports:
        peak = peaks.setdefault(report["rank"], {"rank": report["rank"]})
        for key in ("max_allocated_mb", "max_reserved_mb"):
            if report[key] is not None:
                peak[key] = max(peak.get(key, report[key]), report[key])
    return [peaks[rank] for rank in sorted(peaks)]


def launch(
    config: MegatronConfig, checkout: Checkout, topology: Topology, repeat: int, log_dir: Path
) -> dict:
    """Run one topology once; the launch record of the result document."""
    argv = command.build(config, topology, str(checkout.script), str(log_dir / "data-cache"))
    stem = log_dir / f"{topology.name}-r{repeat}"
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout, stderr = stem.with_suffix(".stdout"), stem.with_suffix(".stderr")
    gpus = gpu.launch_gpus(config.launch.nproc_per_node)
    exclusive = gpu.exclusivity(gpus)
    with gpu.MemorySampler(gpus, config.memory_sample_interval_s) as sampler:
        exit_code, timed_out, seconds = _execute(
            argv, checkout.path, stdout, stderr, config.launch.timeout_s
        )
    streams = {
        name: path.read_text(errors="replace").splitlines()
        for name, path in (("stdout", stdout), ("stderr", stderr))
    }
    text = "\n".join(streams["stdout"] + streams["stderr"])
    iterations = logparse.parse_log(text)
    memory = logparse.parse_memory(text)
    iterations.sort(key=lambda r: r["iteration"])
    failure = failures.classify(exit_code, timed_out, streams, iterations)
    return {
        "topology": topology.name,
        "tp": topology.tp,
        "pp": topology.pp,
        "dp": config.data_parallel(topology),
        "world_size": config.world_size,
        "repeat": repeat,
        "status": failures.status_of(failure),
        "exit_code": exit_code,
        "timed_out": timed_out,
        "duration_s": round(seconds, 3),
        "command": argv,
        "environment_set": dict(command.ENVIRONMENT),
        "stdout": _log_record(stdout),
        "stderr": _log_record(stderr),
        "failure": failure,
        "gpu_exclusive_at_start": exclusive,
        "gpu_memory": sampler.result(),
        "iterations": iterations,
        "memory_reports": memory,
        "metrics": {
            **metrics(iterations, intervals.first_line_repeated(checkout.core_version)),
            "memory_mb_by_rank": memory_by_rank(memory),
        },
    }

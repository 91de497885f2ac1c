"""``mtb plan --verify K``: run the K best layouts and a few spread through the ranking.

The runs go through the matrix runner (``mtb matrix run``, a subprocess: the
local executor or Slurm), one cell per layout with exactly the options the
plan lists, so a verified row is what ``mtb run`` does with them. On CPU a
layout runs three times: timed twice as a user runs it, and its memory measured in a
short run capped at the plan's capacity per rank (the cap maps every large
tensor on its own, which makes the peak resident set follow the live
tensors but costs each allocation its page faults: a quarter to a half
more per step on this kind of machine); the timing runs are repeated in
passes over all the chosen layouts. On a GPU one run gives both. Each row
gets its measurement and the relative errors (predicted - measured) /
measured; the document gets the error statistics, the rank correlation of
predicted and measured step times, and whether the predicted best was the
measured best (within 5 %).
"""

import os
import statistics
import subprocess
import sys
from pathlib import Path

import tomli_w

from mtb.api import UsageError, utc_now, write_atomic

#: what the issue that asked for the planner set as good enough, checked in every verification
TARGETS = {
    "median_abs_step_time_error": 0.15,
    "max_abs_step_time_error": 0.35,
    "max_abs_peak_memory_error": 0.10,
    "max_abs_model_state_error": 0.01,
    "spearman": 0.8,
    "best_gap": 0.05,
}


def choose(rows: list[dict], top: int, spread: int, labels: tuple[str, ...] = ()) -> list[dict]:
    """The ``top`` best fitting rows, ``spread`` more evenly spaced through the rest, and the
    rows named by ``labels``, in ranking order."""
    fitting = [row for row in rows if row["fits"]]
    known = {row["label"] for row in fitting}
    for label in labels:
        if label not in known:
            raise UsageError(
                f"--verify-layout: no layout that fits is labelled {label!r}; "
                "the labels are the plan table's layout column"
            )
    chosen, rest = fitting[: top or 0], fitting[top or 0 :]
    if rest and spread:
        step = len(rest) / spread
        picks = {min(len(rest) - 1, round(step * (index + 0.5))) for index in range(spread)}
        chosen += [rest[index] for index in sorted(picks)]
    chosen += [row for row in rest if row["label"] in labels and row not in chosen]
    return sorted(chosen, key=lambda row: row["rank"])


#: steps of a CPU memory run: the optimizer's state exists from the first step on
MEMORY_STEPS, MEMORY_WARMUP = 3, 1
#: times each layout is timed by default (``--trials``), the fastest median kept (see
#: median_step_ms): on CPU as that many passes over all the layouts, minutes apart, so a slow
#: stretch of a shared machine falls on one measurement of several layouts rather than on
#: every one of a layout; on a GPU as that many trials of one run. Three: with two, one
#: layout of small on 2 ranks measured 1619 ms in one verification and 1289 ms in the next
TIMING_TRIALS = 3


def matrix_spec(document: dict, chosen: list[dict], options: dict, purpose: str) -> dict:
    """A matrix of exactly the chosen layouts (``[[include]]`` only), in ranking order:
    ``timing`` (and memory on a GPU) as the options say, or CPU ``memory`` (short, capped)."""
    workload = document["config"]["workload"]
    steps = {"steps": options["steps"], "warmup_steps": options["warmup_steps"]}
    if purpose == "both":
        steps["repeat"] = options["trials"]
    if purpose == "memory":
        steps = {"steps": MEMORY_STEPS, "warmup_steps": MEMORY_WARMUP}
        steps["memory_limit_per_rank"] = str(document["memory_capacity_bytes"])
    return {
        "name": f"plan-verify-{purpose}",
        "description": f"verification of a plan of {workload['preset']}: {purpose}",
        "command": "run",
        "timeout_s": options["cell_timeout"],
        "options": {
            "preset": workload["preset"],
            "precision": workload["precision"],
            "optimizer": workload["optimizer"],
            "device": document["config"]["profile"]["device"],
            **steps,
            **dict(workload.get("overrides", ())),
        },
        "include": [row["options"] for row in chosen],
    }


def purposes(document: dict, trials: int = TIMING_TRIALS) -> tuple[str, ...]:
    """The matrices a verification runs, in order: on CPU ``trials`` timing passes with a
    capped memory run between the first two (a run that needs more than the capacity ends
    as out of memory there); on a GPU one for both."""
    if document["config"]["profile"]["device"] != "cpu":
        return ("both",)
    passes = ["timing", *(f"timing-{number}" for number in range(2, trials + 1))]
    return (passes[0], "memory", *passes[1:])


def is_timing(purpose: str) -> bool:
    """Whether a matrix of this purpose times its layouts."""
    return purpose == "both" or purpose.startswith("timing")


def verify(pm, document: dict, options: dict, output: str) -> dict:
    """The document with the chosen rows measured and the verification summary."""
    chosen = choose(
        document["layouts"], options["verify_top"], options["spread"], options["verify_layout"]
    )
    directory = Path(options["verify_dir"] or f"results/plan-verify-{utc_now().replace(':', '')}")
    if directory.exists() and any(directory.iterdir()):
        raise UsageError(
            f"--verify-dir: {directory} holds another verification's runs; name a new folder"
        )
    runs = {}
    for purpose in purposes(document, options["trials"]):
        folder = directory / purpose
        spec_path = directory / f"{purpose}.toml"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(spec_path, tomli_w.dumps(matrix_spec(document, chosen, options, purpose)))
        run_matrix(spec_path, folder, options["executor"], document["config"]["world"])
        runs[purpose] = {_settings(cell["cell"]): (cell, folder) for cell in read_cells(folder)}
    for row in chosen:
        found = {
            purpose: cells.get(_settings_of(row["options"])) for purpose, cells in runs.items()
        }
        row["measured"] = measurement(found)
        row["error"] = errors(row["predicted"], row["measured"])
    document["verification"] = summary(chosen, directory)
    return document


def run_matrix(spec_path: Path, directory: Path, executor: str, world: dict) -> None:
    """``mtb matrix run`` on the chosen layouts; its progress goes to the terminal.

    The plan's ranks per node run here even where they outnumber the cores:
    the plan was asked for them, and its profile was measured that way.
    """
    command = [sys.executable, "-m", "mtb", "matrix", "run", str(spec_path)]
    command += ["--output-dir", str(directory), "--executor", executor]
    command += ["--max-ranks", str(world["devices_per_node"])]
    finished = subprocess.run(command, env=os.environ.copy(), check=False)
    if finished.returncode not in (0, 1):  # 1: some cell failed, which its row records
        raise UsageError(f"--verify: the matrix of the chosen layouts exited {finished.returncode}")


def _settings(cell_id: str) -> frozenset:
    """A cell id (``strategy=ddp,micro_batch_size=2,...``) as its set of settings."""
    return frozenset(tuple(part.split("=", 1)) for part in cell_id.split(","))


def _settings_of(options: dict) -> frozenset:
    """A layout's options as the settings of the cell id the matrix gives it."""
    return frozenset((name, str(value)) for name, value in options.items())


def read_cells(directory: Path) -> list[dict]:
    """The matrix document's rows, in the order of its cells (the chosen layouts')."""
    import json

    matrix = json.loads((directory / "matrix.json").read_text())
    return matrix["cells"]


def measurement(found: dict) -> dict:
    """What the runs measured: the fastest median step of the timing runs and its tokens/s,
    the peak memory and the model state (summary means; ``memory`` or ``both``). The status
    is the first run's that did not end ok (``memory: oom``: it needs more than the capacity)."""
    import json

    measured: dict = {"status": "ok", "error": None}
    for purpose, entry in found.items():
        if entry is None:
            return {"status": "not run", "error": f"{purpose}: no cell"}
        cell, folder = entry
        if cell["status"] != "ok":
            return {"status": cell["status"], "error": f"{purpose}: {cell.get('error')}"}
        result = json.loads((folder / cell["result"]).read_text())
        step_ms = median_step_ms(result) if is_timing(purpose) else None
        if step_ms is not None and step_ms < measured.get("step_time_ms", float("inf")):
            tokens_per_step = result["trials"][0]["tokens_per_step"]
            measured.update(step_time_ms=step_ms, tokens_per_s=tokens_per_step / step_ms * 1e3)
        if purpose in ("memory", "both"):
            summary = result["summary"]
            measured.update(
                peak_memory_bytes=peak_memory(summary),
                model_state_bytes=_mean(summary, "model_state_bytes_per_rank"),
            )
    return measured


def median_step_ms(result: dict) -> float:
    """The median measured step of the fastest trial: a few steps slowed by other processes on
    a shared machine move the mean by more than the errors being measured, the median barely;
    a whole trial slowed moves the median too, and noise only ever slows (calibration keeps
    the faster of its runs alike)."""
    return min(
        statistics.median(step["step_ms"] for step in trial["steps"]) for trial in result["trials"]
    )


def _mean(summary: dict, key: str) -> float | None:
    value = summary.get(key)
    return value.get("mean") if isinstance(value, dict) else value


def peak_memory(summary: dict) -> float | None:
    """The CUDA allocator's peak on a GPU, the peak resident set on CPU (max over ranks)."""
    return _mean(summary, "cuda_max_allocated_bytes") or _mean(summary, "peak_rss_bytes")


def errors(predicted: dict, measured: dict) -> dict | None:
    """Relative errors (predicted - measured) / measured of each figure both have."""
    if measured["status"] != "ok":
        return None
    pairs = {
        "step_time": "step_time_ms",
        "tokens_per_s": "tokens_per_s",
        "peak_memory": "peak_memory_bytes",
        "model_state": "model_state_bytes",
    }
    return {
        name: (predicted[key] - measured[key]) / measured[key] if measured.get(key) else None
        for name, key in pairs.items()
    }


def summary(chosen: list[dict], directory: Path) -> dict:
    """Error statistics, rank correlation and the best layout, each beside its target."""
    done = [row for row in chosen if row.get("error")]
    if not done:
        raise UsageError(
            "--verify: no chosen layout ran; see the cells' logs under " + str(directory)
        )
    step = [abs(row["error"]["step_time"]) for row in done]
    memory = [
        abs(row["error"]["peak_memory"]) for row in done if row["error"]["peak_memory"] is not None
    ]
    states = [
        abs(row["error"]["model_state"]) for row in done if row["error"]["model_state"] is not None
    ]
    predicted_best = min(done, key=lambda row: row["predicted"]["step_time_ms"])
    measured_best = min(done, key=lambda row: row["measured"]["step_time_ms"])
    figures = {
        "median_abs_step_time_error": statistics.median(step),
        "max_abs_step_time_error": max(step),
        "median_abs_peak_memory_error": statistics.median(memory) if memory else None,
        "max_abs_peak_memory_error": max(memory) if memory else None,
        "max_abs_model_state_error": max(states) if states else None,
        "spearman": spearman(
            [row["predicted"]["step_time_ms"] for row in done],
            [row["measured"]["step_time_ms"] for row in done],
        ),
        "best_gap": predicted_best["measured"]["step_time_ms"]
        / measured_best["measured"]["step_time_ms"]
        - 1,
    }
    return {
        "verified": len(done),
        "chosen": len(chosen),
        **figures,
        "predicted_best": predicted_best["label"],
        "measured_best": measured_best["label"],
        "matrix_dir": str(directory),
        "targets": TARGETS,
        "met": {name: met(name, figures.get(name)) for name in TARGETS},
    }


def met(name: str, value: float | None) -> bool | None:
    """Whether ``value`` meets the target of ``name`` (None when it was not measured)."""
    if value is None:
        return None
    return value >= TARGETS[name] if name == "spearman" else value <= TARGETS[name]


def spearman(first: list[float], second: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None under 3 pairs."""
    if len(first) < 3:
        return None
    a, b = _ranks(first), _ranks(second)
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    covariance = sum((x - mean_a) * (y - mean_b) for x, y in zip(a, b, strict=True))
    spread = (sum((x - mean_a) ** 2 for x in a) * sum((y - mean_b) ** 2 for y in b)) ** 0.5
    return covariance / spread if spread else None


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks

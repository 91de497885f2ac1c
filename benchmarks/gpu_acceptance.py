"""GPU acceptance: every CUDA path of mtb, checked in one command on one GPU.

Run as ``python benchmarks/gpu_acceptance.py --output DIR`` (``nox -s gpu``
runs it too), on one GPU in at most 8 minutes (``--budget-s``). Each item
runs ``mtb ...`` (or a small Python helper) as a subprocess with its own
timeout, checks what came back and is recorded as ok, failed (with the
error) or skipped (with the reason); a failure never stops the items after
it. DIR receives every result document, each item's log, and the verdicts
in ``summary.json`` and ``summary.md``. Exit 0 when no item failed, else 1.

Items: ``mtb doctor`` (NVML, GPU facts, bf16 matmul peak); ``single`` on the
``large`` preset at sequence length 2048 in bf16, eager and ``--compile``
(MFU, CUDA memory peak, step phases from CUDA events; the MFU targets, 40 %
compiled and compiled/eager >= 1.3, are reported, not enforced); fp16 with
the gradient scaler; ``ddp``, ``fsdp``, ``zero2`` and ``zero3`` at world
size 1 over nccl; a checkpoint save and resume with exact digests; ``mtb
profile`` with CUDA kernels and the device-timeline overlap; ``mtb comm``
over nccl; megatron-core's GPU check; the busy-GPU guard refusing a run
while a second process holds GPU memory. The compiled run goes last: it
takes whatever budget is left.

``--device cpu`` runs the same script with tiny models over gloo, so it
cannot rot where no GPU is: CUDA-only items are skipped with the reason.
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

try:
    from mtb.api import write_atomic
except ImportError as missing:  # every item runs mtb: say how to get it, once
    raise SystemExit(
        f"Error: mtb cannot be imported ({missing}); install it first (docs/quickstart.md)"
    ) from None

BUDGET_S = 480.0
#: an item that cannot have this many seconds of the budget is skipped
MIN_ITEM_S = 20.0
#: grace after an item's timeout before its process group is killed (mtb stops itself first)
KILL_GRACE_S = 15.0
TARGET_MFU = 0.40
TARGET_SPEEDUP = 1.3
STATUSES = ("ok", "failed", "skipped")
BUSY_MARKER = "already in use by other processes"

#: the workloads per device: (flags of the big single run, flags of the small runs)
WORKLOADS = {
    "cuda": {
        "large": [
            *("--preset", "large", "--seq-len", "2048", "--micro-batch-size", "8"),
            *("--precision", "bf16", "--steps", "8", "--warmup-steps", "3"),
        ],
        "small": [
            *("--preset", "small", "--micro-batch-size", "8", "--precision", "bf16"),
            *("--steps", "6", "--warmup-steps", "2"),
        ],
        "comm_sizes": "1M,64M",
    },
    "cpu": {
        "large": [
            *("--preset", "tiny", "--precision", "bf16", "--steps", "3", "--warmup-steps", "1"),
        ],
        "small": ["--preset", "tiny", "--precision", "bf16", "--steps", "3", "--warmup-steps", "1"],
        "comm_sizes": "1K,64K",
    },
}


class Failed(Exception):
    """The item ran and something was wrong: its one-line error."""


class Skipped(Exception):
    """The item cannot run here: the reason."""


@dataclass
class Item:
    """One acceptance check: ``check(ctx)`` returns the figures worth reporting."""

    name: str
    what: str
    check: Callable[["Context"], dict]
    timeout_s: float
    #: why the item is skipped with --device cpu (None: it runs there too)
    cpu_skip: str | None = None


@dataclass
class Context:
    """What an item needs: the device, its folder, its deadline and the results so far."""

    out: Path
    device: str
    deadline: float = 0.0
    item: str = ""
    results: dict = field(default_factory=dict)

    @property
    def workload(self) -> dict:
        return WORKLOADS[self.device]

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def log_path(self) -> Path:
        return self.out / "logs" / f"{self.item}.log"

    def command(self, cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
        """Run ``cmd`` in its own process group until the item's deadline; log its output."""
        timeout = self.remaining()
        if timeout <= 0:
            raise Failed(f"no time left in the item's timeout for: {shown(cmd)}")
        with open(self.log_path(), "a", encoding="utf-8") as log:
            log.write(f"$ {shown(cmd)}\n")
            log.flush()
            child = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
            try:
                stdout, stderr = child.communicate(timeout=timeout + KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                stop(child)
                raise Failed(f"timed out after {timeout:.0f} s: {shown(cmd)}") from None
            finally:
                stop(child)
            log.write(f"{stdout}{stderr}[exit {child.returncode}]\n")
        return subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)

    def mtb(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        """``python -m mtb ARGS``; a non-zero exit fails the item with mtb's last line."""
        done = self.command([sys.executable, "-m", "mtb", *args], env)
        if done.returncode != 0:
            raise Failed(f"exit {done.returncode}: {last_line(done)}")
        return done

    def result(self, name: str, *args: str) -> dict:
        """``mtb ARGS --output DIR/ITEM/NAME.json`` on this device; its document, status ok."""
        path = self.out / self.item / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.mtb(*args, "--output", str(path), "--device", self.device)
        document = json.loads(path.read_text())
        if document.get("status") != "ok":
            raise Failed(f"{name}: status {document.get('status')}: {document.get('error')}")
        return document

    def train(self, name: str, *args: str, command: str = "run") -> dict:
        """A training run (``mtb run`` or ``mtb profile``) ending with the item's deadline."""
        timeout = f"{max(self.remaining(), 1.0):.0f}"
        return self.result(name, command, *args, "--timeout", timeout)


def shown(cmd: list[str]) -> str:
    return " ".join(cmd[2:] if cmd[:3] == [sys.executable, "-m", "mtb"] else cmd)


def last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else "no output"


def stop(child: subprocess.Popen) -> None:
    """SIGKILL whatever is left of the child's process group, then reap the child.

    Also after a normal exit: nothing an item started may hold the GPU while the
    next item runs (the busy-GPU guard would refuse it).
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Failed(message)


def mean(summary: dict, key: str):
    return (summary.get(key) or {}).get("mean")


# --- the items -------------------------------------------------------------------------


def doctor(ctx: Context) -> dict:
    document = ctx.result("doctor", "doctor", "--timeout", "60")
    checks = {check["name"]: check for check in document["checks"]}
    peak = checks["matmul_peak"]["details"]
    figures = {"verdict": document["verdict"], "matmul_peak_tflops": peak["flops"] / 1e12}
    if ctx.device == "cuda":
        gpus = checks["gpus"]
        expect(gpus["status"] == "ok", f"gpus: {gpus['status']}: {gpus['message']}")
        nvml = gpus["details"]["nvml"]
        expect(nvml["available"], f"NVML unavailable: {nvml.get('reason')}")
        expect("bf16" in peak["method"], f"matmul peak not in bf16: {peak['method']}")
        figures.update(gpus=gpus["message"], driver=nvml["driver"])
    return figures


def train_figures(document: dict) -> dict:
    """MFU, throughput, step phases and memory of a train result, checked for sense."""
    summary = document["summary"]
    phases = {p: mean(summary, p) for p in ("data_ms", "forward_backward_ms", "optimizer_ms")}
    step_ms = mean(summary, "step_ms")
    expect(step_ms and phases["forward_backward_ms"] > 0, f"no step phases: {phases}")
    expect(sum(phases.values()) <= step_ms * 1.02, f"phases {phases} exceed step {step_ms} ms")
    figures = {
        "mfu": mean(summary, "mfu"),
        "tokens_per_s": mean(summary, "tokens_per_s"),
        "step_ms": step_ms,
        **phases,
        "peak_flops_source": document["environment"]["peak_flops_source"],
        "final_loss": mean(summary, "final_loss"),
        "compile_s": mean(summary, "compile_s"),
    }
    expect(figures["mfu"] is not None, "MFU is null (unknown device peak)")
    expect(math.isfinite(figures["final_loss"] or math.nan), "final loss is not finite")
    if document["environment"]["device"] == "cuda":
        expect("cuda_max_allocated_bytes" in summary, "no CUDA memory peak in the summary")
        figures["cuda_max_allocated_gib"] = mean(summary, "cuda_max_allocated_bytes") / 2**30
    return figures


def single_eager(ctx: Context) -> dict:
    return train_figures(ctx.train("single", "--strategy", "single", *ctx.workload["large"]))


def single_compiled(ctx: Context) -> dict:
    args = ("--strategy", "single", *ctx.workload["large"], "--compile")
    figures = train_figures(ctx.train("single-compiled", *args))
    expect(figures["compile_s"] and figures["compile_s"] > 0, "no compile time recorded")
    eager = ctx.results.get("single_large_eager", {}).get("figures", {})
    if eager.get("tokens_per_s"):
        figures["speedup_over_eager"] = figures["tokens_per_s"] / eager["tokens_per_s"]
    return figures


def fp16_scaler(ctx: Context) -> dict:
    small = [a if a != "bf16" else "fp16" for a in ctx.workload["small"]]
    document = ctx.train("fp16", "--strategy", "single", *small)
    expect(document["config"]["training"]["precision"] == "fp16", "precision is not fp16")
    steps = document["trials"][0]["steps"]
    figures = train_figures(document)
    figures["skipped_steps"] = sum(step["skipped"] for step in steps)
    expect(figures["skipped_steps"] < len(steps), "the gradient scaler skipped every step")
    return figures


def distributed(strategy: str, needs: str | None = None) -> Callable[[Context], dict]:
    def check(ctx: Context) -> dict:
        if needs and importlib.util.find_spec(needs) is None:
            raise Skipped(f"{needs} is not importable (pip install mtb-strategies[deepspeed])")
        args = ("--strategy", strategy, "--nproc-per-node", "1", "--backend", ctx.backend)
        document = ctx.train(strategy, *args, *ctx.workload["small"])
        backend = document["environment"]["backend"]
        expect(backend == ctx.backend, f"backend {backend}, expected {ctx.backend}")
        return train_figures(document)

    return check


def checkpoint(ctx: Context) -> dict:
    """Save at step 3, resume to 6: loaded state equals saved state, digest for digest."""
    folder = str(ctx.out / ctx.item / "checkpoints")
    base = [*ctx.workload["small"], "--record-digests", "--warmup-steps", "1"]
    saved = ctx.train(
        "save", *base, "--steps", "3", "--checkpoint-dir", folder, "--save-every", "3"
    )
    latest = Path(folder) / (Path(folder) / "latest").read_text().strip()
    verified = str(ctx.out / ctx.item / "verify.json")
    ctx.mtb("checkpoint", "verify", str(latest), "--output", verified, "--device", ctx.device)
    resumed = ctx.train(
        "resume", *base, "--steps", "6", "--checkpoint-dir", folder, "--resume", "latest"
    )
    straight = ctx.train("uninterrupted", *base, "--steps", "6")
    loaded = resumed["checkpoint"]["loaded_digests"]
    expect(loaded == saved["state_digests"], "the loaded state differs from the saved state")
    return {
        "resumed_at_step": resumed["checkpoint"]["start_step"],
        "continuation_bitwise_equal": resumed["state_digests"] == straight["state_digests"],
    }


def profile(ctx: Context) -> dict:
    args = ("--strategy", "ddp", "--nproc-per-node", "1", "--backend", ctx.backend)
    window = ("--profile-warmup", "1", "--profile-active", "3", "--no-profile-baseline")
    small = [*ctx.workload["small"], "--steps", "6", "--warmup-steps", "1"]
    document = ctx.train("profile", *args, *small, *window, command="profile")
    summary = document["profile"]
    overlap = summary["overlap"]
    figures = {
        "timeline": summary["timeline"],
        "overlap_status": overlap["status"],
        "overlap_ratio": overlap.get("ratio"),
        "overlap_reason": overlap.get("reason"),
    }
    if ctx.device == "cuda":
        kernels = summary["top_device_ops"]
        expect(isinstance(kernels, list) and kernels, f"no CUDA kernels in the trace: {kernels}")
        expect(summary["timeline"] == "device", f"overlap from the {summary['timeline']} timeline")
        figures["top_kernel"] = kernels[0]["name"]
    return figures


def comm(ctx: Context) -> dict:
    """Checked collectives; at world size 1 busbw is 0 by definition, so algbw is reported."""
    document = ctx.result(
        "comm",
        "comm",
        *("--nproc-per-node", "1", "--backend", ctx.backend, "--timeout", "120"),
        *("--operations", "all_reduce,all_gather,broadcast", "--sizes", ctx.workload["comm_sizes"]),
        *("--warmup", "3", "--iters", "10"),
    )
    backend = document["environment"]["backend"]
    expect(backend == ctx.backend, f"backend {backend}, expected {ctx.backend}")
    cases = document["measurements"]
    expect(all(c["status"] == "ok" and c["wrong_elements"] == 0 for c in cases), "a wrong case")
    largest = max((c for c in cases if c["operation"] == "all_reduce"), key=lambda c: c["bytes"])
    return {"backend": backend, "cases": len(cases), "all_reduce_algbw_gbps": largest["algbw_gbps"]}


def megatron(ctx: Context) -> dict:
    if importlib.util.find_spec("megatron") is None:
        raise Skipped("megatron-core is not importable (pip install mtb-megatron[megatron-core])")
    done = ctx.command([sys.executable, "-m", "mtb_megatron.gpu_check"])
    expect(done.returncode == 0, f"exit {done.returncode}: {last_line(done)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def busy_guard(ctx: Context) -> dict:
    """A second process holds 3 GiB of the GPU: ``mtb run`` must refuse with one line, exit 2."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        readable, _, _ = select.select([holder.stdout], [], [], max(ctx.remaining(), 0))
        ready = holder.stdout.readline().strip() if readable else "no answer in time"
        expect(ready == "holding", f"the memory-holding process did not start: {ready!r}")
        output = str(ctx.out / ctx.item / "refused.json")
        tiny = ("--preset", "tiny", "--steps", "2", "--warmup-steps", "1", "--device", "cuda")
        run = [sys.executable, "-m", "mtb", "run", *tiny, "--output", output]
        done = ctx.command(run, env={"ALLOW_BUSY_GPUS": "0"})  # a user's override stays out
    finally:
        stop(holder)
    expect(done.returncode == 2, f"exit {done.returncode}, expected 2: {last_line(done)}")
    expect(BUSY_MARKER in done.stderr, f"not the busy-GPU refusal: {last_line(done)}")
    return {"refusal": last_line(done)}


HOLDER = """
import time, torch
held = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(600)
"""

NO_GPU = "needs a CUDA GPU"
DEEPSPEED_ON_CPU = "DeepSpeed JIT-builds a C++ op for minutes on a CPU (mtb-strategies tests it)"
ITEMS = [
    Item("doctor", "mtb doctor: NVML, GPU facts, bf16 matmul peak, nccl all_reduce", doctor, 120),
    Item("single_large_eager", "single, large preset, seq 2048, bf16, eager", single_eager, 180),
    Item("fp16_grad_scaler", "single in fp16 with the gradient scaler", fp16_scaler, 120, NO_GPU),
    Item("ddp", "ddp at world size 1 over nccl", distributed("ddp"), 120),
    Item("fsdp", "fsdp at world size 1 over nccl", distributed("fsdp"), 120),
    Item(
        "zero2",
        "zero2 (DeepSpeed) at world size 1 over nccl",
        distributed("zero2", "deepspeed"),
        150,
        DEEPSPEED_ON_CPU,
    ),
    Item(
        "zero3",
        "zero3 (DeepSpeed) at world size 1 over nccl",
        distributed("zero3", "deepspeed"),
        150,
        DEEPSPEED_ON_CPU,
    ),
    Item(
        "checkpoint_resume", "save at step 3, verify, resume to 6: exact digests", checkpoint, 200
    ),
    Item("profile", "mtb profile (ddp): CUDA kernels, device-timeline overlap", profile, 150),
    Item("comm", "mtb comm at world size 1 over nccl", comm, 120),
    Item(
        "megatron_gpu_check", "megatron-core GPT forward/backward on the GPU", megatron, 120, NO_GPU
    ),
    Item(
        "busy_gpu_guard",
        "a run refused while another process holds GPU memory",
        busy_guard,
        90,
        NO_GPU,
    ),
    Item(
        "single_large_compiled",
        "single, large preset, seq 2048, bf16, --compile",
        single_compiled,
        330,
        "torch.compile on a CPU takes minutes: test_compile.py's slow test covers it",
    ),
]


# --- running them ----------------------------------------------------------------------

PROBE = """
import importlib.util, json, platform, torch
cuda = torch.cuda.is_available()
print(json.dumps({
    "python": platform.python_version(),
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "cuda_available": cuda,
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "deepspeed": importlib.util.find_spec("deepspeed") is not None,
    "megatron_core": importlib.util.find_spec("megatron") is not None,
}))
"""


def probe() -> dict:
    """Versions and the GPU, seen by a child process (this one never touches CUDA)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        return {"error": last_line(done), "cuda_available": False}
    return {**json.loads(done.stdout), "host": platform.node()}


def run_item(item: Item, ctx: Context, selected: bool, budget_end: float) -> dict:
    """One item's record: status, error or reason, seconds, figures; never raises."""
    record = {"name": item.name, "what": item.what, "status": "skipped", "error": None}
    left = budget_end - time.monotonic()
    if not selected:
        record["reason"] = "not selected (--only / --skip)"
    elif ctx.device == "cpu" and item.cpu_skip:
        record["reason"] = item.cpu_skip
    elif left < MIN_ITEM_S:
        record["reason"] = f"the time budget was spent ({left:.0f} s left)"
    else:
        started = time.monotonic()
        ctx.item, ctx.deadline = item.name, started + min(item.timeout_s, left)
        ctx.log_path().parent.mkdir(parents=True, exist_ok=True)
        record.update(attempt(item, ctx), seconds=round(time.monotonic() - started, 1))
    return record


def attempt(item: Item, ctx: Context) -> dict:
    try:
        return {"status": "ok", "figures": item.check(ctx)}
    except Skipped as reason:
        return {"status": "skipped", "reason": str(reason)}
    except Failed as error:
        return {"status": "failed", "error": str(error)}
    except Exception as error:  # a check that broke: recorded, never the end of the script
        return {"status": "failed", "error": f"{type(error).__name__}: {error}"}


def targets(results: dict) -> dict:
    """The large preset's MFU targets on one H200: reported, never a failure."""
    eager = results.get("single_large_eager", {}).get("figures", {})
    compiled = results.get("single_large_compiled", {}).get("figures", {})
    mfu, speedup = compiled.get("mfu"), compiled.get("speedup_over_eager")
    return {
        "eager_mfu": eager.get("mfu"),
        "compiled_mfu": mfu,
        "compiled_over_eager": speedup,
        "target_compiled_mfu": TARGET_MFU,
        "target_compiled_over_eager": TARGET_SPEEDUP,
        "compiled_mfu_met": None if mfu is None else mfu >= TARGET_MFU,
        "compiled_over_eager_met": None if speedup is None else speedup >= TARGET_SPEEDUP,
    }


def summary(ctx: Context, environment: dict, records: list, wall_s: float, budget: float) -> dict:
    counts = {status: sum(r["status"] == status for r in records) for status in STATUSES}
    return {
        "kind": "gpu_acceptance",
        "device": ctx.device,
        "environment": environment,
        "budget_s": budget,
        "wall_s": round(wall_s, 1),
        "counts": counts,
        "status": "failed" if counts["failed"] else "ok",
        "items": records,
        "targets": targets(ctx.results),
    }


def note(record: dict) -> str:
    if record["status"] != "ok":
        return (record.get("error") or record.get("reason") or "").replace("|", "/")
    figures = record.get("figures") or {}
    noted = [k for k in NOTED if figures.get(k) is not None]
    noted = [k for k in noted if k != "compile_s" or figures[k]]  # 0: an eager run
    return ", ".join(f"{k} {shown_value(figures[k])}" for k in noted)


#: the figures an ok item shows in the summary table (all of them are in summary.json)
NOTED = (
    "mfu",
    "tokens_per_s",
    "compile_s",
    "speedup_over_eager",
    "matmul_peak_tflops",
    "backend",
    "all_reduce_algbw_gbps",
    "timeline",
    "overlap_status",
    "overlap_ratio",
    "resumed_at_step",
    "continuation_bitwise_equal",
    "skipped_steps",
    "refusal",
)


def shown_value(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def markdown(document: dict) -> str:
    env, counts = document["environment"], document["counts"]
    lines = [
        f"# GPU acceptance ({document['device']}): {document['status']}",
        "",
        f"{env.get('gpu') or 'no GPU'}; torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), "
        f"Python {env.get('python')}; {document['wall_s']:.0f} s of a {document['budget_s']:.0f} s "
        f"budget; ok {counts['ok']}, failed {counts['failed']}, skipped {counts['skipped']}.",
        "",
        "| item | status | s | figures, error or reason |",
        "|---|---|---:|---|",
    ]
    for r in document["items"]:
        lines.append(f"| {r['name']} | {r['status']} | {r.get('seconds', '')} | {note(r)} |")
    t = document["targets"]
    lines += [
        "",
        "Large preset, seq 2048, bf16 (targets on one H200, reported only): "
        f"compiled MFU {pct(t['compiled_mfu'])} (target >= {pct(TARGET_MFU)}), "
        f"eager MFU {pct(t['eager_mfu'])}, compiled/eager "
        f"{ratio(t['compiled_over_eager'])} "
        f"(target >= {TARGET_SPEEDUP}).",
        "",
    ]
    return "\n".join(lines)


def ratio(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="directory of results and the summary")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="wall-clock budget")
    parser.add_argument("--only", default="", help="comma-separated items to run (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated items to leave out")
    return parser.parse_args(argv)


def chosen(args: argparse.Namespace, items: list[Item]) -> set[str]:
    names = [i.name for i in items]
    only, skip = (set(filter(None, v.split(","))) for v in (args.only, args.skip))
    unknown = (only | skip) - set(names)
    if unknown:
        raise SystemExit(f"Error: unknown item(s) {', '.join(sorted(unknown))}; known: {names}")
    return {n for n in names if (not only or n in only) and n not in skip}


def main(argv=None, items: list[Item] | None = None) -> int:
    args = parse_args(argv)
    items = ITEMS if items is None else items
    selected = chosen(args, items)
    out = Path(args.output)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"Error: --output {out} is not empty; give a new directory")
    started = time.monotonic()
    environment = probe()
    device = args.device
    if device == "auto":
        device = "cuda" if environment.get("cuda_available") else "cpu"
    if device == "cuda" and not environment.get("cuda_available"):
        raise SystemExit(f"Error: --device cuda, but torch sees no GPU: {environment}")
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(out, device)
    records = []
    for item in items:
        record = run_item(item, ctx, item.name in selected, started + args.budget_s)
        ctx.results[item.name] = record
        records.append(record)
        print(f"{item.name}: {record['status']} {note(record)}", file=sys.stderr, flush=True)
        document = summary(ctx, environment, records, time.monotonic() - started, args.budget_s)
        write_atomic(out / "summary.json", json.dumps(document, indent=2) + "\n")
        write_atomic(out / "summary.md", markdown(document))
    print(markdown(document))
    return 1 if document["counts"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""A stand-in for Megatron-LM's pretrain_gpt.py: prints what Megatron prints, or fails like it.

With ``--data-path`` it fails as Megatron does when PREFIX.idx or PREFIX.bin is
missing. FAKE_MEGATRON_MODE picks the behaviour: ok (iteration lines), oom, nccl, nan
(raises after two lines, like Megatron's NaN check), nan_count (exits 0 with
NaN iterations counted), import, hang. Like Megatron, only the last rank prints
the iteration lines; like megatron-core 0.16 and later (read from the
checkout's package_info.py), it prints iteration 1 too. It needs no torch and
no GPU.
"""

import argparse
import os
import re
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
for name in (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--train-iters",
    "--log-interval", "--global-batch-size", "--micro-batch-size", "--lr",
):  # fmt: skip
    parser.add_argument(name, type=float)
parser.add_argument("--log-throughput", action="store_true")
parser.add_argument("--data-path", nargs="*")
parser.add_argument("--mock-data", action="store_true")
args, _ = parser.parse_known_args()

mode = os.environ.get("FAKE_MEGATRON_MODE", "ok")
rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
tp, pp = int(args.tensor_model_parallel_size), int(args.pipeline_model_parallel_size)
last = rank == world - 1


def fail(message: str) -> None:
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "pretrain_gpt.py", line 300, in <module>', file=sys.stderr)
    print(message, file=sys.stderr, flush=True)
    sys.exit(1)


if mode == "import":
    fail("ModuleNotFoundError: No module named 'transformer_engine'")
if bool(args.data_path) == args.mock_data:
    fail("AssertionError: give exactly one of --data-path and --mock-data")
for prefix in args.data_path or []:  # as IndexedDataset opens them: PREFIX.idx, PREFIX.bin
    for suffix in (".idx", ".bin"):
        if not Path(prefix + suffix).is_file():
            fail(f"FileNotFoundError: [Errno 2] No such file or directory: '{prefix}{suffix}'")
if rank == 0:
    print(
        f"using world size: {world}, data-parallel size: {world // (tp * pp)}, "
        f"context-parallel size: 1, tensor-model-parallel size: {tp}, "
        f"pipeline-model-parallel size: {pp}",
        flush=True,
    )
iters, interval = int(args.train_iters), int(args.log_interval)
info = Path("megatron/core/package_info.py")
minor = re.search(r"^MINOR = (\d+)", info.read_text(), re.M) if info.exists() else None
first = [1] if minor and int(minor[1]) >= 16 and interval > 1 else []
logged = first + list(range(interval, iters + 1, interval))
first_logged = logged[0] if logged else None
for iteration in logged:
    if mode == "oom" and iteration > interval:
        fail(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free."
        )
    if mode == "nccl":
        fail(
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
        )
    if mode == "nan" and iteration > 2 * interval:
        fail(
            "RuntimeError: Rank 0: found NaN in local grad norm in backward pass before "
            "data-parallel communication collective. Device: 0, node: fake"
        )
    if mode == "hang":
        time.sleep(600)
    nan = 1 if mode == "nan_count" and iteration == iters else 0
    line = f" [2026-01-01 00:00:{iteration % 60:02d}] iteration {iteration:8d}/{iters:8d} |"
    line += f" consumed samples: {iteration * int(args.global_batch_size):12d} |"
    line += f" elapsed time per iteration (ms): {100.0 + iteration:.1f} |"
    if args.log_throughput:
        line += f" throughput per GPU (TFLOP/s/GPU): {50.0 + iteration / 10:.1f} |"
    line += f" learning rate: {args.lr:.6E} |"
    line += f" global batch size: {int(args.global_batch_size):5d} |"
    line += f" lm loss: {10.0 - iteration / 100:.6E} |"
    line += " loss scale: 1.0 | grad norm: 1.234 |"
    line += f" number of skipped iterations:   0 | number of nan iterations: {nan:3d} |"
    if last:
        print(line, flush=True)
    if iteration == first_logged:  # report_memory, megatron/training/utils.py at core_v0.16.1
        peak = 1000.0 + 10 * rank
        print(
            f"[Rank {rank}] (after {iteration} iterations) memory (MB) | allocated: {900.0:.2f}"
            f" | max allocated: {peak:.2f} | reserved: {2048.0:.2f} | max reserved: {2048.0:.2f}",
            flush=True,
        )

"""Megatron's iteration lines into numbers; failures classified with the line that shows them."""

import pytest

from mtb_megatron import failures, logparse

LINE = (
    " [2025-06-01 12:00:00] iteration       20/     100 | consumed samples:         1280 |"
    " elapsed time per iteration (ms): 812.3 | throughput per GPU (TFLOP/s/GPU): 101.2 |"
    " learning rate: 3.000000E-04 | global batch size:    64 | lm loss: 9.876543E+00 |"
    " loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   1 |"
    " number of nan iterations:   0 |"
)


def test_a_megatron_iteration_line_parses_every_field():
    assert logparse.parse_line(LINE) == {
        "iteration": 20,
        "train_iters": 100,
        "consumed_samples": 1280,
        "elapsed_ms_per_iteration": 812.3,
        "throughput_tflops_per_gpu": 101.2,
        "learning_rate": 3e-4,
        "global_batch_size": 64,
        "lm_loss": 9.876543,
        "loss_scale": 1.0,
        "grad_norm": 2.345,
        "skipped_iterations": 1,
        "nan_iterations": 0,
    }


def test_other_lines_are_ignored_and_nan_loss_becomes_none():
    text = "\n".join(["> building GPT model ...", LINE.replace("9.876543E+00", "nan"), "done"])
    (record,) = logparse.parse_log(text)
    assert record["lm_loss"] is None and record["iteration"] == 20
    assert logparse.parse_line("iteration count is high") is None


def streams(stderr: list[str], stdout: list[str] = ()) -> dict:
    return {"stderr": list(stderr), "stdout": list(stdout)}


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "oom"),
        ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried", "oom"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL", "communication"),
        ("[rank1]:[E] Watchdog caught collective operation timeout: WorkNCCL(5)", "communication"),
        ("RuntimeError: Rank 0: found NaN in local grad norm in backward pass", "nan"),
        ("ModuleNotFoundError: No module named 'transformer_engine'", "import"),
        ("pretrain_gpt.py: error: unrecognized arguments: --bogus", "import"),
        ("ValueError: something else", "unknown"),
    ],
)  # fmt: skip
def test_failed_launches_are_classified_with_their_line(line, kind):
    log = streams(["Traceback (most recent call last):", line, "E1203 torchrun: ChildFailedError"])
    failure = failures.classify(1, False, log, [])
    assert failure["kind"] == kind
    # unknown: the exception line, not torchrun's summary after it
    assert failure["line"] == line and failure["stream"] == "stderr"
    assert failures.status_of(failure) == {"oom": "oom"}.get(kind, "failed")


def test_oom_wins_over_the_nccl_errors_it_causes_in_peers():
    log = streams(["[rank1] NCCL error in: ...", "torch.OutOfMemoryError: CUDA out of memory."])
    assert failures.classify(1, False, log, [])["kind"] == "oom"


def test_timeout_nan_counts_and_silent_success():
    log = streams([], ["iteration 1/2 | lm loss: 1.0 |"])
    timeout = failures.classify(-9, True, log, [])
    assert (timeout["kind"], failures.status_of(timeout)) == ("timeout", "timeout")
    counted = streams([], [" iteration 2/2 | number of nan iterations:   1 |"])
    nan = failures.classify(0, False, counted, logparse.parse_log(counted["stdout"][0]))
    assert nan["kind"] == "nan" and nan["line_number"] == 1
    silent = failures.classify(0, False, streams([], ["nothing"]), [])
    assert silent["kind"] == "unknown" and silent["detail"] == "no iteration line in the log"
    assert failures.classify(0, False, log, logparse.parse_log(log["stdout"][0])) is None


# torchrun's summary after a worker failed (torch/distributed/elastic/multiprocessing/errors)
TORCHRUN_SUMMARY = [
    "E1203 12:00:01.000000 123 torch/distributed/elastic/multiprocessing/api.py:874] failed"
    " (exitcode: 1) local_rank: 0 (pid: 124) of binary: /usr/bin/python",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "pretrain_gpt.py FAILED",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  exitcode  : 1 (pid: 124)",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]
# megatron/training/arguments.py at core_v0.16.1, line 317 (in validate_args)
ASSERTION = (
    "AssertionError: world size (2) is not divisible by total_model_size (total_model_size=4)"
)
VALIDATE_ARGS = [
    "Traceback (most recent call last):",
    '  File "/src/Megatron-LM/pretrain_gpt.py", line 342, in <module>',
    '  File "/src/Megatron-LM/megatron/training/initialize.py", line 92, in initialize_megatron',
    "    validate_args(args, args_defaults)",
    '  File "/src/Megatron-LM/megatron/training/arguments.py", line 317, in validate_args',
    "    assert args.world_size % total_model_size == 0, (",
    ASSERTION,
]
# TORCH_CPP_LOG_LEVEL=INFO start-up lines of ProcessGroupNCCL (torch 2.6+)
NCCL_INFO = [
    "[I1203 12:00:00.000000000 ProcessGroupNCCL.cpp:913] [PG ID 0 PG GUID 0 Rank 0]"
    " ProcessGroupNCCL initialization options: size: 2, global rank: 0, TIMEOUT(ms): 600000,"
    " USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
    "[I1203 12:00:00.000000000 ProcessGroupNCCL.cpp:922] [PG ID 0 PG GUID 0 Rank 0]"
    " ProcessGroupNCCL environments: NCCL version: 2.27.5, TORCH_NCCL_ASYNC_ERROR_HANDLING: 3,"
    " TORCH_NCCL_DUMP_ON_TIMEOUT: 1, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 60000,"
    " TORCH_NCCL_BLOCKING_WAIT: 0, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TORCH_NCCL_NAN_CHECK: 0",
]


@pytest.mark.parametrize("prefix", ["", "[rank0]: "])
def test_an_argument_assertion_is_shown_not_torchruns_border(prefix):
    lines = NCCL_INFO + [prefix + line for line in VALIDATE_ARGS] + TORCHRUN_SUMMARY
    failure = failures.classify(1, False, streams(lines), [])
    assert (failure["kind"], failure["line"]) == ("assertion", prefix + ASSERTION)
    assert failure["line_number"] == len(NCCL_INFO) + len(VALIDATE_ARGS)


def test_nccl_info_lines_are_not_communication_failures():
    lines = [*NCCL_INFO, "ValueError: something else", *TORCHRUN_SUMMARY]
    failure = failures.classify(1, False, streams(lines), [])
    assert (failure["kind"], failure["line"]) == ("unknown", "ValueError: something else")
    timeout = [
        *NCCL_INFO,
        "[rank1]:[E1203 12:10:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1,"
        " NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
        *TORCHRUN_SUMMARY,
    ]
    found = failures.classify(1, False, streams(timeout), [])
    assert found["kind"] == "communication" and found["line_number"] == len(NCCL_INFO) + 1


def test_without_any_exception_line_the_last_line_that_is_not_a_border_is_shown():
    failure = failures.classify(1, False, streams(["starting", *TORCHRUN_SUMMARY[4:]]), [])
    assert failure["line"] == TORCHRUN_SUMMARY[-2].strip()

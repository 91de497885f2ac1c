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
    expected = line if kind != "unknown" else "E1203 torchrun: ChildFailedError"
    assert failure["line"] == expected and failure["stream"] == "stderr"
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

"""Command construction: each topology's exact torchrun + pretrain_gpt.py command."""

import sys

import pytest
from click.testing import CliRunner

from mtb.config import LaunchConfig
from mtb_megatron import command
from mtb_megatron.config import MegatronConfig
from mtb_megatron.topology import parse_topologies

SCRIPT = "/opt/megatron/pretrain_gpt.py"
CACHE = "/results/run.logs/data-cache"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]


def model_args(tp: int, pp: int, *tail: str) -> list[str]:
    return [
        "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
        "--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "8",
        "--seq-length", "512", "--max-position-embeddings", "512",
        "--micro-batch-size", "1", "--global-batch-size", "8",
        "--train-iters", "20", "--log-interval", "5", "--lr", "0.0003", "--seed", "1234",
        "--transformer-impl", "transformer_engine", "--mock-data",
        "--tokenizer-type", "NullTokenizer", "--vocab-size", "32768", "--eval-iters", "0",
        *tail,
    ]  # fmt: skip


def config(**changes) -> MegatronConfig:
    values = {
        "topologies": parse_topologies("1x1,2x1,4x1,2x2,1x4"),
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "seq_length": 512,
        "train_iters": 20,
        "log_interval": 5,
        "launch": LaunchConfig(nproc_per_node=4),
        "transformer_impl": "transformer_engine",
        **changes,
    }
    return MegatronConfig(**values)


@pytest.mark.parametrize(
    ("topology", "tp", "pp", "dp"),
    [("1x1", 1, 1, 4), ("2x1", 2, 1, 2), ("4x1", 4, 1, 1), ("2x2", 2, 2, 1), ("1x4", 1, 4, 1)],
)
def test_each_topology_gives_the_expected_command(topology, tp, pp, dp):
    cfg = config()
    chosen = next(t for t in cfg.topologies if t.name == topology)
    assert cfg.data_parallel(chosen) == dp
    expected = [*TORCHRUN, "--nproc-per-node", "4", SCRIPT]
    expected += model_args(tp, pp, "--bf16", "--log-throughput")
    expected += ["--sequence-parallel"] if tp > 1 else []  # Transformer Engine with TP > 1
    assert command.build(cfg, chosen, SCRIPT, CACHE) == expected


def test_precision_throughput_and_multi_node_flags():
    cfg = config(
        precision="fp32",
        log_throughput=False,
        launch=LaunchConfig(
            nproc_per_node=2, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29500", max_restarts=1
        ),
    )
    argv = command.build(cfg, cfg.topologies[1], SCRIPT, CACHE)
    assert argv[:17] == [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29500", "--rdzv-id", "mtb",
        "--nproc-per-node", "2", "--max-restarts", "1",
    ]  # fmt: skip
    assert argv[17:] == [SCRIPT, *model_args(2, 1), "--sequence-parallel"]


def test_shell_line_names_directory_and_variables():
    line = command.shell_line(["python", "x y.py"], "/opt/megatron lm")
    assert line == (
        "cd '/opt/megatron lm' && CUDA_DEVICE_MAX_CONNECTIONS=1 PYTHONUNBUFFERED=1 python 'x y.py'"
    )


def test_dry_run_prints_every_command_and_runs_nothing(cli, checkout, tmp_path):
    out = tmp_path / "never.json"
    args = ["megatron", "matrix", "--topologies", "1x1,2x1,1x2", "--nproc-per-node", "2"]
    args += ["--megatron-dir", str(checkout["path"]), "--megatron-ref", "v0.1-fake"]
    args += ["--num-layers", "2", "--global-batch-size", "4", "--output", str(out), "--dry-run"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()[3:]  # after the checkout, transformer, data lines
    assert lines[0::2] == [
        "# 1x1: TP 1, PP 1, DP 2",
        "# 2x1: TP 2, PP 1, DP 1",
        "# 1x2: TP 1, PP 2, DP 1",
    ]
    script = str(checkout["path"].resolve() / "pretrain_gpt.py")
    for line, (tp, pp) in zip(lines[1::2], [(1, 1), (2, 1), (1, 2)], strict=True):
        assert line.startswith(f"cd {checkout['path'].resolve()} && CUDA_DEVICE_MAX_CONNECTIONS=1 ")
        assert f"--nproc-per-node 2 {script} --tensor-model-parallel-size {tp} " in line
        assert f"--pipeline-model-parallel-size {pp} " in line
    assert not out.exists()


def test_matrix_defaults_to_every_topology_that_fits(cli, checkout):
    args = ["megatron", "matrix", "--nproc-per-node", "4", "--num-layers", "2", "--dry-run"]
    args += ["--megatron-dir", str(checkout["path"]), "--megatron-ref", "v0.1-fake"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    headers = [line for line in result.output.splitlines() if ": TP " in line]
    names = [line.split(":")[0][2:] for line in headers]
    assert names == ["1x1", "1x2", "2x1", "2x2", "4x1"]  # 1x4: 2 layers over 4 stages

"""Helpers for strategy tests: 2-rank gloo launches compared with `single`."""

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from mtb.testing import longest_first

PLUGIN_DIR = Path(__file__).parent / "plugins"
# DeepSpeed's JIT-built ops go to a folder of the tests' own (nox sets one per session): a
# build killed elsewhere, in the user's cache, leaves a lock these runs never wait on
os.environ.setdefault(
    "TORCH_EXTENSIONS_DIR", str(Path(tempfile.gettempdir()) / f"mtb-tests-torch-ext-{os.getuid()}")
)
# tiny model, fp32, 5 measured steps, a learning rate that moves the weights; a fixed MFU
# peak: core's tests check the CPU calibration, which costs each rank of each launch a second
BASE = [
    "--preset",
    "tiny",
    "--steps",
    "5",
    "--warmup-steps",
    "0",
    "--lr",
    "1e-3",
    "--device",
    "cpu",
    "--timeout",
    "300",
    "--peak-tflops",
    "1",
]


def launch(strategy, tmp_path: Path, *args, nproc=2, name="run", env=None):
    """``mtb run`` in a subprocess with the dump observer; returns (process, result, state)."""
    out, dump = tmp_path / f"{name}.json", tmp_path / f"{name}.pt"
    child_env = {
        **os.environ,
        "MTB_PLUGIN_MODULES": "mtb_test_dump",
        "MTB_TEST_DUMP": str(dump),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")])
        ),
        **(env or {}),
    }
    cmd = [
        sys.executable,
        "-m",
        "mtb",
        "run",
        "--strategy",
        strategy,
        *BASE,
        "--nproc-per-node",
        str(nproc),
        "--output",
        str(out),
        *map(str, args),
    ]
    done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=400)
    result = json.loads(out.read_text()) if out.exists() else None
    state = torch.load(dump) if dump.exists() else None
    return done, result, state


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this pytest run that every xdist worker sees (the parent of the workers'
    own base folders), for the runs that session fixtures share."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / "shared" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def launch_once(folder: Path, strategy, *args, nproc=2, env=None):
    """:func:`launch` into ``folder`` unless a worker of this pytest run did already.

    A session fixture runs once in each xdist worker that needs it, and the
    test files that share a reference run go to both workers: the first to
    ask launches under a lock on the folder, the other reads what it left
    (the same process record, result and state).
    """
    record = folder / "process.json"
    with _locked(folder / "lock"):
        if not record.exists():
            done, _, _ = launch(strategy, folder, *args, nproc=nproc, env=env)
            fields = ("args", "returncode", "stdout", "stderr")
            record.write_text(json.dumps({field: getattr(done, field) for field in fields}))
    done = subprocess.CompletedProcess(**json.loads(record.read_text()))
    out, dump = folder / "run.json", folder / "run.pt"
    result = json.loads(out.read_text()) if out.exists() else None
    state = torch.load(dump) if dump.exists() else None
    return done, result, state


def losses(result) -> list[float]:
    return [s["loss"] for s in result["trials"][0]["steps"]]


def assert_same_training(result, state, reference):
    """Per-step losses within 1e-5 (relative) and final parameters within tolerance."""
    ref_result, ref_state = reference
    assert losses(result) == pytest.approx(losses(ref_result), rel=1e-5)
    assert state.keys() == ref_state.keys()
    for name, tensor in ref_state.items():
        torch.testing.assert_close(
            state[name].float(),
            tensor.float(),
            rtol=1e-4,
            atol=1e-5,
            msg=lambda m, n=name: f"{n}: {m}",
        )


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """`single` on the whole global batch (4 sequences a step), the baseline."""
    tmp = shared_folder(tmp_path_factory, "single")
    done, result, state = launch_once(tmp, "single", "--micro-batch-size", "4", nproc=1)
    assert done.returncode == 0, done.stderr
    return result, state


#: layouts that split matmuls are compared with SGD, not AdamW: AdamW divides each
#: gradient by its own running magnitude, so the rounding noise of a gradient that is
#: zero in exact arithmetic (the key bias's) becomes a learning-rate-sized step under
#: any two summation orders; SGD keeps parameter differences proportional to gradient
#: differences. Clipped at 1.0: about half the steps of this run clip
SGD = ["--optimizer", "sgd", "--lr", "0.05", "--max-grad-norm", "1.0"]


@pytest.fixture(scope="session")
def reference_sgd(tmp_path_factory):
    """`single` on the whole global batch of 4 sequences."""
    tmp = shared_folder(tmp_path_factory, "single-sgd")
    done, result, state = launch_once(tmp, "single", "--micro-batch-size", "4", *SGD, nproc=1)
    assert done.returncode == 0, done.stderr
    return result, state


#: four blocks (two pipeline stages per rank fit), clipping that acts on every step
PIPELINE_MODEL = ["--n-layers", "4", "--max-grad-norm", "0.5"]


@pytest.fixture(scope="session")
def reference_pipeline(tmp_path_factory):
    """`single` with PIPELINE_MODEL on the whole global batch of 4 sequences."""
    tmp = shared_folder(tmp_path_factory, "single-4-blocks")
    done, result, state = launch_once(
        tmp, "single", *PIPELINE_MODEL, "--micro-batch-size", 4, nproc=1
    )
    assert done.returncode == 0, done.stderr
    return result, state


class Runs:
    """Results by (strategy, variant, args), launched once in the pytest run (both xdist
    workers: :func:`launch_once`) and shared by the tests below.

    Every launch also counts the blocking all-reduces of each step (mtb_test_collectives).
    """

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.cache: dict = {}
        self.counts: dict = {}

    def __call__(self, strategy, variant, *args):
        key = (strategy, variant, *args)
        if key not in self.cache:
            digest = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
            tmp = shared_folder(self.tmp_path_factory, f"{strategy}-{variant}-{digest}")
            counts = tmp / "collectives.json"
            env = {
                "MTB_PLUGIN_MODULES": "mtb_test_dump,mtb_test_collectives",
                "MTB_TEST_COLLECTIVES": str(counts),
            }
            done, result, state = launch_once(tmp, strategy, *args, env=env)
            assert done.returncode == 0, done.stderr
            self.cache[key] = (result, state)
            self.counts[key] = json.loads(counts.read_text()) if counts.exists() else None
        return self.cache[key]


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory)


def _accumulation(mode: str, *extra) -> tuple:
    args = ["--micro-batch-size", "1", "--grad-accum-steps", "2", "--gradient-sync-mode", mode]
    return (f"k2-{mode}", *args, *extra)


def accumulated(runs, strategy, mode="auto", *extra):
    """2 ranks x 2 micro-batches of 1 sequence: the reference's global batch of 4.

    Matching ``single`` here shows both that the strategy equals single on the
    same global batch and that K=2 micro-batches of B equal one step of 2B
    (the reference takes its 4 sequences in one micro-batch).
    """
    return runs(strategy, *_accumulation(mode, *extra))


def all_reduces_per_step(runs, strategy, mode="auto", *extra) -> list[int]:
    """Blocking all-reduces of each step of :func:`accumulated`'s run (not the gradient sync)."""
    accumulated(runs, strategy, mode, *extra)
    return runs.counts[(strategy, *_accumulation(mode, *extra))]


def syncs(result) -> set:
    return {s["gradient_syncs"] for s in result["trials"][0]["steps"]}


def per_rank_bytes(result, state: str = "total") -> list[int]:
    return [r["model_state_bytes"][state] for r in result["trials"][0]["per_rank"]]


@pytest.fixture
def invoke_strategies():
    """The CLI in-process over the installed plugins (no subprocess)."""
    from click.testing import CliRunner

    from mtb.cli import make_cli
    from mtb.plugins import build_plugin_manager

    def run(*args):
        cli = make_cli(build_plugin_manager())
        return CliRunner().invoke(cli, ["run", "--preset", "tiny", *map(str, args)])

    return run


def bare_grad_norms(steps: int = 5) -> list[float]:
    """Global gradient norms of `reference`'s run, computed by a plain loop in this process.

    One model from the seed, the whole global batch (4 sequences) each step,
    AdamW at BASE's learning rate, and the norm of every gradient taken by
    torch.linalg.vector_norm: no mtb engine, trainer or strategy involved.
    """
    from mtb import config
    from mtb.data import SyntheticTokens
    from mtb.model import GPT

    cfg = config.resolve(flags={"preset": "tiny", "data": {"micro_batch_size": 4}})
    torch.manual_seed(cfg.data.seed)
    model = GPT(cfg.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    data = SyntheticTokens(cfg.model.vocab_size, cfg.model.seq_len, 4, cfg.data.seed)
    norms = []
    for step in range(steps):
        batch = data.batch(step, 0)
        model(batch.inputs, batch.targets).backward()
        grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.cat(grads))))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return norms


def grad_norms(result) -> list[float]:
    return [s["grad_norm"] for s in result["trials"][0]["steps"]]


#: the files that run longest, from CI's timings: they start first (see longest_first)
LONGEST_FIRST = (
    "test_checkpoints.py",
    "test_ddp_fsdp.py",
    "test_expert_parallel.py",
    "test_pipeline.py",
    "test_pipeline_four_ranks.py",
    "test_zero.py",
    "test_nd_four_ranks.py",
    "test_context_parallel_four_ranks.py",
    "test_memory_pressure.py",
)


def pytest_collection_modifyitems(items):
    longest_first(items, LONGEST_FIRST)

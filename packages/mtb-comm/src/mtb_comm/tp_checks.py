"""``mtb tp check|mlp|sequence`` on one rank: TP forward and backward against a reference.

Every rank builds the full weights, input and output gradient from the
seed, runs the single-device reference and its tensor-parallel version,
and compares output, input gradient and parameter gradients (the slice of
the reference this rank's shard should hold). ``inject_wrong_shard`` hands
each rank its neighbour's shard: a layout bug the check must catch.
"""

import torch
import torch.nn.functional as F

from mtb_comm import tp_comm, tp_layers

TOLERANCES = {"float32": 1e-5, "bfloat16": 2e-2}
CASES = {"check": ("column", "row"), "mlp": ("mlp",), "sequence": ("sequence",)}
EXPECTED_COLLECTIVES = {
    "column": {"forward": {"all_gather": 1}, "backward": {"all_reduce": 1}},
    "row": {"forward": {"all_reduce": 1}, "backward": {"all_gather": 1}},
    "mlp": {"forward": {"all_reduce": 1}, "backward": {"all_reduce": 1}},
    "sequence": {
        "forward": {"all_gather": 1, "reduce_scatter": 1},
        "backward": {"all_gather": 1, "reduce_scatter": 1},
        "grad_sync": {"all_reduce": 1},
    },
}
# dimension each parameter is sharded along (None: replicated)
SHARD_DIMS = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1}


def make_weights(config, dtype) -> dict:
    """Full weights, input and output gradients from the seed (fp32 draws, then cast)."""
    g = torch.Generator().manual_seed(config.seed)
    h, f, s, b = config.hidden, config.ffn_hidden, config.seq_len, config.batch

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    return {
        "fc1.weight": draw(f, h, scale=h**-0.5),
        "fc1.bias": draw(f, scale=0.1),
        "fc2.weight": draw(h, f, scale=f**-0.5),
        "fc2.bias": draw(h, scale=0.1),
        "norm.weight": 1 + draw(h, scale=0.1),
        "norm.bias": draw(h, scale=0.1),
        "x": draw(s, b, h),
        "x_wide": draw(s, b, f),
        "dy": draw(s, b, h),
        "dy_wide": draw(s, b, f),
    }


def _reference(case: str, w: dict):
    """Leaf copies of the weights, the reference output, and its gradients."""
    leaves = {k: v.clone().requires_grad_(True) for k, v in w.items() if not k.startswith("dy")}
    if case == "column":
        out = F.linear(leaves["x"], leaves["fc1.weight"], leaves["fc1.bias"])
        out.backward(w["dy_wide"])
    elif case == "row":
        out = F.linear(leaves["x_wide"], leaves["fc2.weight"], leaves["fc2.bias"])
        out.backward(w["dy"])
    else:
        forward = tp_layers.reference_block if case == "sequence" else tp_layers.reference_mlp
        out = forward(leaves["x"], leaves)
        out.backward(w["dy"])
    return out.detach(), {k: v.grad for k, v in leaves.items() if v.grad is not None}


def _parallel(case: str, w: dict, index: int, world: int, tally):
    """This rank's TP module for ``case``, its input and its upstream gradient."""
    if case == "column":
        layer = tp_layers.ColumnParallelLinear(
            w["fc1.weight"], w["fc1.bias"], index, world, tally, True, False
        )
        return layer, {"x": w["x"]}, w["dy_wide"]
    if case == "row":
        layer = tp_layers.RowParallelLinear(
            w["fc2.weight"], w["fc2.bias"], index, world, tally, False, False
        )
        return layer, {"x_wide": w["x_wide"]}, w["dy"]
    if case == "mlp":
        return tp_layers.ParallelMLP(w, index, world, tally), {"x": w["x"]}, w["dy"]
    rank = torch.distributed.get_rank()
    block = tp_layers.SequenceParallelBlock(w, index, world, tally)
    return block, {"x": w["x"].chunk(world, 0)[rank]}, w["dy"].chunk(world, 0)[rank]


def _expected_slice(name: str, tensor, case: str, rank: int, world: int):
    """The part of a reference tensor that this rank's tensor must equal."""
    if case == "sequence" and name in ("out", "x"):
        return tensor.chunk(world, 0)[rank]
    if name in SHARD_DIMS:
        return tensor.chunk(world, SHARD_DIMS[name])[rank]
    return tensor


def _named_grads(case: str, module) -> dict:
    """Parameter gradients under the names of make_weights."""
    prefix = {"column": "fc1.", "row": "fc2."}.get(case, "")
    return {prefix + n.removeprefix("mlp."): p.grad for n, p in module.named_parameters()}


def run_case(case: str, dtype_name: str, config, rank: int, world: int, device) -> dict:
    """Raw errors of one case on this rank: {tensor: (max abs error, max |reference|)}."""
    w = {k: v.to(device) for k, v in make_weights(config, getattr(torch, dtype_name)).items()}
    ref_out, ref_grads = _reference(case, w)
    tally = tp_comm.Collectives()
    index = (rank + 1) % world if config.inject_wrong_shard else rank
    module, inputs, dy = _parallel(case, w, index, world, tally)
    ((input_name, x),) = inputs.items()
    x = x.clone().requires_grad_(True)
    out = module(x)
    out.backward(dy)
    if case == "sequence":
        module.sync_replicated_grads()
    mine = {"out": out.detach(), input_name: x.grad, **_named_grads(case, module)}
    reference = {"out": ref_out, **ref_grads}
    errors = {}
    for name, tensor in mine.items():
        expected = _expected_slice(name, reference[name], case, rank, world).float()
        errors[name] = (
            float((tensor.float() - expected).abs().max()),
            float(expected.abs().max()),
        )
    return {"case": case, "dtype": dtype_name, "errors": errors, "collectives": tally.as_dict()}


def measure(context, config) -> list[dict]:
    return [
        run_case(case, dtype, config, context.rank, context.world_size, context.device)
        for case in CASES[config.check]
        for dtype in config.dtypes
    ]

"""Live checks for PyTorch, on the LeNet dlbench's own torch backend builds."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch

from dlbench.frameworks import probing as common
from dlbench.frameworks.onnxruntime.export_check import onnx_compare
from dlbench.models.weights import init_weights


def _lenet(device: str = "cpu"):
    from dlbench.frameworks import get_backend

    backend = get_backend("torch")
    spec = common.lenet_spec()
    return backend, backend.build(spec, init_weights(spec, 0), device, "eager"), spec


class _Infer(torch.nn.Module):
    """The backend's network as a one-input, one-output module (what exporters expect)."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)[0]


def forward(job: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"framework_version": torch.__version__, "gpu_visible": torch.cuda.is_available()}
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        backend, model, _ = _lenet(device)
        y = backend.to_numpy(backend.forward(model, backend.place(common.reference_case()[2], model))())
        out[device] = {"what": "dlbench torch backend LeNet forward, batch 4", "output_shape": list(y.shape),
                       common.OUTPUT: y.tolist(),
                       "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    return out


def onnx_export(job: dict[str, Any]) -> dict[str, Any]:
    _, model, _ = _lenet()
    module = _Infer(model.net).eval()
    x, _ = common.batch(0)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lenet.onnx")
        torch.onnx.export(module, (torch.from_numpy(x),), path, dynamo=True, input_names=["x"], output_names=["y"])
        result = onnx_compare(path, x, expected)
    return {"exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}", **result}


def train(job: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)
    _, model, _ = _lenet()
    net = model.net.train()
    opt = torch.optim.SGD(net.parameters(), lr=common.LR, momentum=common.MOMENTUM)

    def run_steps(first: int, last: int):
        losses = []
        for step in range(first, last):
            x, y = common.batch(step)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x))[0], torch.from_numpy(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, {k: v.detach().numpy() for k, v in net.state_dict().items()}

    def save(path: str) -> None:
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, path + ".pt")

    def load(path: str) -> None:
        state = torch.load(path + ".pt")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])

    result = common.train_phase(job, job["steps"], run_steps, save, load)
    return {**result, "api": "torch.save / torch.load of model.state_dict() and optimizer.state_dict()"}


def allreduce(job: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    rank, world = job["rank"], job["world"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job['ports'][0]}", rank=rank, world_size=world)
    try:
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        backend = dist.get_backend()
    finally:
        dist.destroy_process_group()
    return {"pid": os.getpid(), "rank": rank, "world": world, "value": float(value.item()),
            "api": f"torch.distributed.all_reduce (backend {backend}, tcp://127.0.0.1)"}


#: the live checks this probe runs, by name (its declaration's ``probe_checks``)
CHECKS = {"forward": forward, "onnx_export": onnx_export, "train": train, "allreduce": allreduce}

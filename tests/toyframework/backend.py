"""The toy framework's backend: torch's builder and forward, declared forward-only by its folder."""

from dlbench.frameworks.torch.backend import TorchBackend

from . import DECLARATION


class ToyBackend(TorchBackend):
    declaration = DECLARATION

    def build(self, spec, weights, device="cpu", variant=None):
        return super().build(spec, weights, device, "eager")


Backend_ = ToyBackend

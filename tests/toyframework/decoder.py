"""The toy framework's greedy decoder: torch's, under the toy's name."""

from dlbench.frameworks.torch.decoder import TorchDecoder


class ToyDecoder(TorchDecoder):
    framework = "toyfw"
    variants = ("eager",)

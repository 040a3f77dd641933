"""A test framework with planted behaviours, loaded into measuring processes via DLBENCH_PLUGINS.

It is the torch backend with variants that misbehave on purpose:
``ok`` (plain torch), ``crash`` (the process aborts in the timed closure), ``hang`` (the closure
never returns), ``oom`` (the process is SIGKILLed, as the kernel's OOM killer does),
``broken`` (a transposed kernel: fails the equivalence gate), ``slow`` (sleeps 30% of a forward
on top of it: a planted slowdown for compare), ``lr`` (the convergence trainer's learning rate 10x the
spec's: only the convergence agreement check sees it; in ``train_step`` the gate's update check would), ``held``
(the closure waits while the file named by ``$DLBENCH_FAKE_HOLD`` exists and lists the batch size,
then runs as ``ok``: a test holds a cell mid-measurement for as long as it needs, and releases it),
``fp32only`` (accepts any precision and silently builds float32: the gate's precision check must catch it),
``noprofile`` (plain torch with no profiler, as a framework dlbench has not wired one into),
``warmslow`` (each closure's first 50 calls take 10 ms more: a warm-up longer than the protocol's),
``metered`` (each call adds 1000 uJ to the planted RAPL counter ``$DLBENCH_POWERCAP_ROOT/intel-rapl:0/energy_uj``:
the energy of a cell's window is then exactly its timed calls').
"""

import os
import signal
import time

from dlbench.frameworks import FrameworkInfo

FRAMEWORK_INFO = FrameworkInfo("fakefw", __file__, "torch", "torch",
                               ("ok", "crash", "hang", "oom", "broken", "slow", "lr", "held", "fp32only",
                                "noprofile", "warmslow", "metered"),
                               "test double (torch)", devices=("cpu", "cuda"))


def _backend():
    import numpy as np

    from dlbench.frameworks.base import Backend, OptimizerSpec
    from dlbench.frameworks.torch.backend import Builder, TorchBackend

    class TransposedKernel(Builder):
        def make_conv2d(self, layer, shape):
            m = super().make_conv2d(layer, shape)
            t = self.params[f"{layer.name}.weight"][0]
            self.params[f"{layer.name}.weight"] = (t, lambda a: np.swapaxes(a, 2, 3), lambda a: np.swapaxes(a, 2, 3))
            return m

    class Fake(TorchBackend):
        name = "fakefw"
        variants = FRAMEWORK_INFO.variants

        def build(self, spec, weights, device="cpu", variant=None):
            self.mode = variant or "ok"
            self.builder_class = TransposedKernel if self.mode == "broken" else Builder
            saved, self.variants = self.variants, TorchBackend.variants
            asked = self.precision
            if self.mode == "fp32only":
                self.precision = "fp32"
            try:
                return super().build(spec, weights, device, "eager")
            finally:
                self.variants, self.precision = saved, asked

        def _wrap(self, fn, batch):
            """Misbehave from a closure's third call on: the equivalence gate calls each closure at most twice
            (its update check takes two training steps),
            the timer many times, so these fail in measurement, not in verification."""
            mode = self.mode
            calls = [0]

            def later(action):
                def run():
                    calls[0] += 1
                    return action() if calls[0] >= 3 else fn()
                return run

            if mode == "crash":
                return later(os.abort)
            if mode == "hang":
                return later(lambda: time.sleep(3600))
            if mode == "oom":
                return later(lambda: os.kill(os.getpid(), signal.SIGKILL))
            if mode == "held":
                return later(lambda: _held(len(batch["x"])) or fn())
            if mode == "warmslow":
                def run():
                    calls[0] += 1
                    if calls[0] <= 50:
                        time.sleep(0.01)
                    return fn()
                return run
            if mode == "metered":
                counter = os.path.join(os.environ["DLBENCH_POWERCAP_ROOT"], "intel-rapl:0", "energy_uj")

                def run():
                    with open(counter, "r+") as f:
                        value = int(f.read()) + 1000
                        f.seek(0)
                        f.write(f"{value}\n")
                        f.truncate()
                    return fn()
                return run
            if mode == "slow":
                def run():
                    t0 = time.perf_counter()
                    out = fn()
                    time.sleep(0.3 * (time.perf_counter() - t0))
                    return out
                return run
            return fn

        def profile(self, run, calls, outdir):
            if self.mode == "noprofile":
                return Backend.profile(self, run, calls, outdir)
            return super().profile(run, calls, outdir)

        def trainer(self, model, opt):
            if self.mode == "lr":
                opt = OptimizerSpec(lr=opt.lr * 10, momentum=opt.momentum)
            return super().trainer(model, opt)

        def forward(self, model, batch):
            return self._wrap(super().forward(model, batch), batch)

        def gradient(self, model, batch):
            return self._wrap(super().gradient(model, batch), batch)

        def train_step(self, model, batch, opt):
            step = TorchBackend.trainer(self, model, opt)  # torch's train_step, without the planted ``lr``
            return self._wrap(lambda: step(batch), batch)

    return Fake


def _held(size):
    hold = os.environ.get("DLBENCH_FAKE_HOLD", "")
    while True:
        try:
            with open(hold) as f:
                if str(size) not in f.read().split():
                    return
        except OSError:
            return
        time.sleep(0.05)


def __getattr__(name):
    if name == "Backend_":
        return _backend()
    raise AttributeError(name)

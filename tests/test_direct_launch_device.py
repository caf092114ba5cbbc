"""DirectLauncher launches on its tensors' device, not the current one: checked with a stand-in driver and
kernel (no GPU here), a tensor that reports cuda:1 while device 0 is current."""

import contextlib
from types import SimpleNamespace

import pytest
import torch

from normlab.norms.backends.triton import direct_launch


class OnDevice(torch.Tensor):
    """A CPU tensor that reports a CUDA device index, as a tensor on that GPU would."""

    index = 1

    def get_device(self):
        return self.index


def on_device(index: int) -> torch.Tensor:
    t = torch.Tensor._make_subclass(OnDevice, torch.zeros(4))
    t.index = index
    return t


class StandInDriver:
    """driver.active: device 0 is current; records which device's stream each launch asked for."""

    def __init__(self):
        self.current, self.streams = 0, []

    def get_current_device(self):
        return self.current

    def get_current_stream(self, device):
        self.streams.append((device, self.current))  # (the device asked for, the one current at the time)
        return f"stream-{device}"


class StandInKernel:
    """A compiled-kernel stand-in: records each launch and the device current when it ran."""

    def __init__(self, driver):
        self.driver, self.compiles, self.launches = driver, [], []
        param = lambda name, constexpr=False: SimpleNamespace(  # noqa: E731
            name=name, is_constexpr=constexpr, do_not_specialize=False
        )
        self.params = [param("X"), param("n"), param("BLOCK", True)]
        self.__name__ = "stand_in"

    def __getitem__(self, grid):
        def compile_and_launch(*args, num_warps, **constexprs):
            self.compiles.append(self.driver.current)
            return SimpleNamespace(run=self.run, function=f"function@{self.driver.current}", packed_metadata=None)

        return compile_and_launch

    def run(self, *launch_args):
        self.launches.append((self.driver.current, launch_args[3], launch_args[4]))  # current, stream, function


@pytest.mark.skipif(direct_launch.knobs is None, reason="Triton < 3.4 launches through kernel[grid] (tested below)")
def test_kernels_compile_key_and_launch_on_the_tensors_device(monkeypatch):
    driver = StandInDriver()
    monkeypatch.setattr(direct_launch, "driver", SimpleNamespace(active=driver))
    monkeypatch.setattr(direct_launch, "_launch_hooks_installed", lambda: False)

    @contextlib.contextmanager
    def switched_to(device):
        previous, driver.current = driver.current, device
        try:
            yield
        finally:
            driver.current = previous

    monkeypatch.setattr(direct_launch, "switched_to", switched_to)
    kernel = StandInKernel(driver)
    launcher = direct_launch.DirectLauncher(kernel)
    for _ in range(2):  # the first call compiles, the second goes straight to the C launcher
        launcher((1,), on_device(1), 8, num_warps=4, BLOCK=16)
    assert kernel.compiles == [1], "compiled while cuda:1 was current"
    assert kernel.launches == [(1, "stream-1", "function@1")], "launched on cuda:1's stream, with cuda:1 current"
    assert driver.current == 0, "the current device is restored after the call"
    assert launcher.compiled_for(on_device(1), 8, num_warps=4, BLOCK=16) is not None
    assert launcher.compiled_for(on_device(0), 8, num_warps=4, BLOCK=16) is None, "keyed by device"

    launcher((1,), on_device(0), 8, num_warps=4, BLOCK=16)  # a tensor on the current device: no switch
    assert kernel.compiles == [1, 0] and all(asked == current for asked, current in driver.streams)


def test_a_triton_without_knobs_launches_every_call_through_the_kernel_as_written(monkeypatch):
    """Triton < 3.4 (3.2 pairs with torch 2.6) has no `triton.knobs`, and its compiled kernels' launchers take
    other arguments: every call goes through `kernel[grid](...)`, never the direct C launcher."""
    driver = StandInDriver()
    monkeypatch.setattr(direct_launch, "driver", SimpleNamespace(active=driver))
    monkeypatch.setattr(direct_launch, "knobs", None)
    kernel = StandInKernel(driver)
    launcher = direct_launch.DirectLauncher(kernel)
    for _ in range(3):
        launcher((1,), on_device(0), 8, num_warps=4, BLOCK=16)
    assert kernel.compiles == [0, 0, 0] and kernel.launches == [], "each call went through kernel[grid]"
    assert launcher.compiled_for(on_device(0), 8, num_warps=4, BLOCK=16) is None

"""The C++ kernel on a user's machine: no compiler, a cache shared between CPUs, and a portable build."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from normlab.norms.backends import cpp

try:
    COMPILER = cpp._compiler()
except cpp.KernelBuildError:
    COMPILER = None
needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler here")

WITHOUT_COMPILER = """
import json, warnings, torch
from normlab import rms_norm, rms_norm_reference
from normlab.norms.backends.cpp import KernelBuildError
x, w = torch.randn(4, 8), torch.randn(8)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ys = [rms_norm(x, w), rms_norm(2 * x, w)]
try:
    rms_norm(x, w, backend="cpp")
    refusal = None
except KernelBuildError as error:
    refusal = str(error)
print(json.dumps({
    "warnings": [str(c.message) for c in caught if "normlab" in str(c.message)],
    "refusal": refusal,
    "error": float((ys[0].double() - rms_norm_reference(x.double(), w.double())).abs().max()),
}))
"""


def test_without_a_compiler_auto_falls_back_once_and_cpp_refuses_with_the_same_message(tmp_path):
    # No compiler on PATH and no CXX: as on a machine that has none (torch itself needs neither to import).
    env = {k: v for k, v in os.environ.items() if k != "CXX"}
    env.update(PATH=str(tmp_path), NORMLAB_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_COMPILER], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert len(seen["warnings"]) == 1, seen["warnings"]
    assert "none of g++, c++, clang++ is on PATH" in seen["refusal"], seen["refusal"]
    assert seen["warnings"][0].endswith(seen["refusal"])
    assert seen["error"] < 1e-5  # the fallback computed it
    assert not (tmp_path / "cache").exists()


@needs_compiler
def test_the_cache_key_holds_the_cpu_and_the_march(monkeypatch):
    here = cpp.cached_library(COMPILER, cpp.flags())
    monkeypatch.setattr(cpp, "_cpu_identity", lambda: "model name: another CPU\nflags: fpu sse2")
    elsewhere = cpp.cached_library(COMPILER, cpp.flags())
    monkeypatch.setenv(cpp.MARCH_SETTING, "x86-64-v2")
    portable = cpp.cached_library(COMPILER, cpp.flags())
    assert len({here, elsewhere, portable}) == 3
    assert "-march=x86-64-v2" in cpp.flags()


def test_the_march_setting_defaults_to_native_and_refuses_what_is_not_a_march(monkeypatch):
    monkeypatch.delenv(cpp.MARCH_SETTING, raising=False)
    assert cpp.march() == "native"
    monkeypatch.setenv(cpp.MARCH_SETTING, "x86-64 -o /tmp/elsewhere")
    with pytest.raises(cpp.KernelBuildError, match="NORMLAB_CPP_MARCH='x86-64 -o /tmp/elsewhere' is not a -march"):
        cpp.flags()


PORTABLE = """
import torch
from normlab import rms_norm, rms_norm_reference
from normlab.norms.backends import cpp
x, w = torch.randn(64, 96, dtype=torch.float64), torch.randn(96, dtype=torch.float64)
error = float((rms_norm(x, w, backend="cpp") - rms_norm_reference(x, w)).abs().max())
print(error, cpp.build_info()["flags"][-1])
"""


@needs_compiler
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 is an x86 -march")
def test_a_portable_build_computes_the_norm_and_a_bad_march_names_the_setting(monkeypatch, tmp_path):
    env = dict(os.environ, NORMLAB_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    env[cpp.MARCH_SETTING] = "x86-64"
    done = subprocess.run([sys.executable, "-c", PORTABLE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    error, march = done.stdout.split()
    assert float(error) < 1e-12 and march == "-march=x86-64"
    assert [p.suffix for p in tmp_path.iterdir()] == [".so"]
    monkeypatch.setenv("NORMLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(cpp.MARCH_SETTING, "no-such-cpu")
    with pytest.raises(cpp.KernelBuildError, match=r"\(NORMLAB_CPP_MARCH=no-such-cpu\) failed"):
        cpp._build(COMPILER)


@needs_compiler
def test_build_info_records_the_march_it_builds_for(monkeypatch):
    monkeypatch.setenv(cpp.MARCH_SETTING, "x86-64-v3")
    cpp.build_info.cache_clear()
    try:
        info = cpp.build_info()
    finally:
        cpp.build_info.cache_clear()
    assert info["flags"][-1] == "-march=x86-64-v3"

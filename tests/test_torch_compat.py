"""normlab on the torch releases it claims (src/normlab/norms/torch_range.toml): the refusal of an older torch at
import, and each fallback for what an older torch in the range lacks, tested on whatever torch runs the tests.

The matrix (noxfile.py, `make test-torch-range`) runs this file on every release of the range, so a fallback is
exercised both where it is needed and where it is not.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from normlab.norms import torch_versions


def _import_normlab_with_torch_version(version: str) -> subprocess.CompletedProcess:
    """`import normlab` in a fresh interpreter whose torch reports `version` (torch itself is the installed one)."""
    program = f"import torch\ntorch.__version__ = {version!r}\nimport normlab\nprint('imported')\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=env)


def test_a_torch_below_the_range_is_refused_at_import_in_one_line_naming_the_range():
    oldest = torch_versions.OLDEST
    major, minor = map(int, oldest.split("."))
    below = f"{major}.{minor - 1}.1+cpu"
    done = _import_normlab_with_torch_version(below)
    assert done.returncode == 1 and "imported" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"normlab.norms.torch_versions.UnsupportedTorch: normlab needs torch {oldest} or newer "
        f"(tested: {torch_versions.tested_range()}); this environment has torch {below}. "
        f"Upgrade it: pip install 'torch>={oldest}'"
    )
    # Raised by the check that `import normlab` runs first, never from inside a backend that met a missing API.
    frames = [line for line in done.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert len(frames) <= 3 and all("backends" not in frame for frame in frames), done.stderr


@pytest.mark.parametrize("version", [f"{torch_versions.OLDEST}.0+cu124", "2.16.0a0+git1234", "3.0.0"])
def test_the_oldest_release_and_anything_newer_import(version):
    done = _import_normlab_with_torch_version(version)
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr


def test_release_reads_local_and_prerelease_versions():
    assert torch_versions.release("2.6.0+cu124") == (2, 6, 0)
    assert torch_versions.release("2.16.0a0+git1234") == (2, 16, 0)
    assert torch_versions.release("2.13") == (2, 13, 0)
    assert torch_versions.release("2.10.0") > torch_versions.release("2.9.1")  # numerically, not as strings
    with pytest.raises(ValueError, match="not a torch version"):
        torch_versions.release("nightly")


@pytest.mark.parametrize("triton_release", ["3.2", "3.6"])
def test_the_interpreter_s_numpy_2_4_patch_takes_either_triton_signature(monkeypatch, triton_release):
    """Triton 3.2 (torch 2.6's) patches its tensor class with `_patch_lang_tensor(tensor)`, Triton 3.6 with
    `_patch_lang_tensor(tensor, scope)`; under NumPy >= 2.4 (the floor) normlab's fix must wrap either, so that a
    loop bound held as a 1-element array converts to an int."""
    pytest.importorskip("triton")
    import numpy as np
    from triton.runtime import interpreter

    from normlab.norms.backends.triton import _runtime

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    class StandInTensor:
        def __init__(self, value):
            self.handle = type("Handle", (), {"data": np.array([value], dtype=np.int32)})()

    originals = []
    if triton_release == "3.2":
        original, extra = (lambda tensor: originals.append(tensor)), ()
    else:
        original, extra = (lambda tensor, scope: originals.append(tensor)), (Scope(),)
    monkeypatch.setattr(interpreter, "_patch_lang_tensor", original)
    _runtime.patch_interpreter_for_numpy_2_4()
    assert interpreter._patch_lang_tensor is not original, "NumPy >= 2.4 needs the patch"
    interpreter._patch_lang_tensor(StandInTensor, *extra)
    assert originals == [StandInTensor], "Triton's own patching still runs"
    assert list(range(StandInTensor(5))) == [0, 1, 2, 3, 4]

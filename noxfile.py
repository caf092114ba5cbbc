"""The kernel tests on every torch release normlab claims, each in a fresh virtual environment, from the built wheel.

    nox -s kernels                                   # the whole matrix (`make test-torch-range`)
    nox -s "kernels-3.11(torch='2.6.0')"             # one cell (`.ci/run` runs the oldest this way)
    nox -s matrix_table                              # data/torch-range.json and the README's table, from the cells

The matrix is src/normlab/norms/torch_range.toml: its Pythons × its torch releases. nox, not tox, because
the matrix is read from that file in plain Python and parametrised in two decorators; tox would need the releases
typed again as factors in its ini, a second place to keep in step.

Each cell, as a user who has torch already would:
1. installs that torch alone (from a wheelhouse that keeps what the registry served, since pip's own cache does not
   keep these multi-GB wheels here), with the paired Triton that torch's own metadata names;
2. builds normlab's wheel from a copy of the sources and `pip install`s it with its `triton` extra, resolving
   against the index, then checks that the torch and Triton of step 1 are still the ones installed;
3. runs the kernel tests (KERNEL_TESTS) against the installed wheel, with the Triton interpreter on, and records
   passed/failed/skipped and times in build/torch-range/<cell>.json.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).resolve().parent
TORCH_RANGE = tomllib.loads((ROOT / "src" / "normlab" / "norms" / "torch_range.toml").read_text())
RESULTS = ROOT / "build" / "torch-range"
# Outside the checkout, so that CI's fresh clone and later runs on this machine find what an earlier run downloaded.
WHEELHOUSE = Path(os.environ.get("NORMLAB_WHEELHOUSE", Path.home() / ".cache" / "normlab" / "torch-wheels"))
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src")

# The norm library's own tests: the specification, the public API, the modules, the Hugging Face patch, the C++
# backend, DyT, the bad-input refusals, the Triton kernels in the interpreter, and the older-torch fallbacks.
KERNEL_TESTS = (
    "tests/test_reference.py",
    "tests/test_functional.py",
    "tests/test_modules.py",
    "tests/test_dyt.py",
    "tests/test_bad_input.py",
    "tests/test_huggingface_patch.py",
    "tests/test_cpp_backend_setup.py",
    "tests/test_cpu_kernel.py",
    "tests/test_triton_kernels.py",
    "tests/test_direct_launch_device.py",
    "tests/test_torch_compat.py",
)
# What the tests need beside normlab[triton]: transformers for the Hugging Face patch, and accelerate for its
# loading with a device_map, at the lock's versions.
LOCK = dict(line.split("==", 1) for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line)
TEST_REQUIREMENTS = ("pytest", *(f"{name}=={LOCK[name]}" for name in ("transformers", "accelerate")))

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "no"  # every cell starts from an empty environment
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["kernels"]


def _pyenv_interpreters_on_path() -> None:
    """Put pyenv's installed Pythons of the matrix on PATH: pyenv's shims answer only for the selected version, so
    `python3.12` fails there although /root/.pyenv/versions/3.12.x is installed."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = []
    for version in TORCH_RANGE["pythons"]:
        installed = sorted(glob.glob(str(root / "versions" / f"{version}.*" / "bin" / f"python{version}")))
        if installed:
            found.append(str(Path(installed[-1]).parent))
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_pyenv_interpreters_on_path()


def _pip(session: nox.Session, *args: str, **kwargs) -> str | bool:
    # /etc/xdg/pip on these machines caps torch at the releases on its disk; the matrix asks for exact releases on
    # purpose, so the cap is lifted for these pip calls only (an empty constraint file), not for the machine.
    env = {"PIP_CONSTRAINT": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **kwargs.pop("env", {})}
    return session.run("python", "-m", "pip", *args, env=env, **kwargs)


def _installed(session: nox.Session, *names: str) -> dict[str, str]:
    probe = (
        "import json, importlib.metadata as m\n"
        "found = {}\n"
        f"for name in {list(names)!r}:\n"
        "    try:\n"
        "        found[name] = m.version(name)\n"
        "    except m.PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))"
    )
    return json.loads(session.run("python", "-c", probe, silent=True).strip().splitlines()[-1])


def _torch_triton_requirement(session: nox.Session) -> str | None:
    """The Triton release the installed torch names in its metadata (its CUDA builds pin one; the CPU build none)."""
    probe = (
        "import importlib.metadata as m\n"
        "print(next((r.split(';')[0].strip() for r in m.requires('torch') or [] if r.startswith('triton')), ''))"
    )
    printed = session.run("python", "-c", probe, silent=True).strip().splitlines()
    return printed[-1] if printed else None


def _build_wheel(session: nox.Session, workdir: Path) -> Path:
    """normlab's wheel, built from a copy of the sources (the build writes build/ and *.egg-info beside them)."""
    source = workdir / "source"
    source.mkdir()
    for name in SOURCES:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, source / name)
    _pip(session, "wheel", "--no-deps", "-q", "-w", str(workdir / "dist"), str(source))
    (wheel,) = (workdir / "dist").glob("normlab-*.whl")
    return wheel


def _junit_counts(path: Path) -> dict[str, float]:
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "test_seconds": round(float(suite.get("time", 0.0)), 1)}


@nox.session(python=TORCH_RANGE["pythons"])
@nox.parametrize("torch", TORCH_RANGE["torch"])
def kernels(session: nox.Session, torch: str) -> None:
    """The kernel tests on one torch release, from the wheel, beside that torch as the user installed it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record_path = RESULTS / f"python{session.python}-torch{torch}.json"
    record_path.unlink(missing_ok=True)
    commit = session.run("git", "-C", str(ROOT), "rev-parse", "--short=9", "HEAD", external=True, silent=True).strip()
    dirty = session.run(
        "git", "-C", str(ROOT), "status", "--porcelain", "--", *SOURCES, "tests", external=True, silent=True
    )
    record: dict = {
        "python": session.python,
        "torch_requested": torch,
        "outcome": "failed",
        "git_commit": commit + ("+changes" if dirty.strip() else ""),  # what the wheel and the tests were made from
    }
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix=f"normlab-torch-{torch}-"))
    try:
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        _pip(session, "download", "-q", "-d", str(WHEELHOUSE), f"torch=={torch}")
        # --no-compile: byte-compiling torch's thousands of modules took minutes here; Python compiles what it imports.
        _pip(session, "install", "-q", "--no-compile", "--no-index", "--find-links", str(WHEELHOUSE), f"torch=={torch}")
        # The CPU build (the lock's, from this machine's disk) names no Triton: take the lock's, as `make install`.
        paired_triton = _torch_triton_requirement(session) or f"triton=={LOCK['triton']}"
        _pip(session, "download", "-q", "-d", str(WHEELHOUSE), paired_triton)
        _pip(session, "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE), paired_triton)
        before = _installed(session, "torch", "triton")

        wheel = _build_wheel(session, workdir)
        _pip(session, "install", "-q", "--find-links", str(WHEELHOUSE), f"{wheel}[triton]", *TEST_REQUIREMENTS)
        after = _installed(session, "torch", "triton", "numpy", "transformers")
        record.update(installed=after, install_seconds=round(time.perf_counter() - started, 1))
        for name, version in before.items():
            if after.get(name) != version:
                session.error(f"installing normlab's wheel replaced {name} {version} with {after.get(name)}")

        env = {
            "PYTHONPATH": "",  # the wheel in the fresh environment, never the checkout's src/
            "TRITON_INTERPRET": "1",
            "NORMLAB_CACHE_DIR": str(workdir / "cache"),  # the C++ kernel built on first use, as for a user
            "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor"),
        }
        where = session.run("python", "-c", "import normlab; print(normlab.__file__)", env=env, silent=True)
        if not where.strip().startswith(str(Path(session.virtualenv.location).resolve())):
            session.error(f"normlab was imported from {where.strip()}, not from the wheel in this environment")
        junit = workdir / "junit.xml"
        try:
            session.run(
                "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={junit}", *KERNEL_TESTS, env=env
            )
            record["outcome"] = "passed"
        finally:
            if junit.exists():
                record.update(_junit_counts(junit))
    finally:
        record["seconds"] = round(time.perf_counter() - started, 1)
        record_path.write_text(json.dumps(record, indent=1) + "\n")
        shutil.rmtree(workdir, ignore_errors=True)
        # A torch environment is several GB: a cell keeps only its record.
        shutil.rmtree(session.virtualenv.location, ignore_errors=True)


@nox.session(python=False)
def matrix_table(session: nox.Session) -> None:
    """Gather the cells' records into data/torch-range.json and write the README's table from it."""
    from normlab.study import torch_matrix

    matrix = torch_matrix.gather(RESULTS)
    torch_matrix.MATRIX_FILE.write_text(json.dumps(matrix, indent=1) + "\n")
    readme = ROOT / "README.md"
    block = torch_matrix.readme_block(matrix)
    readme.write_text(torch_matrix.replace_block(readme.read_text(), block))
    session.log(block)

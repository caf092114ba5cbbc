"""The wheel as a user gets it: built, installed in a fresh virtual environment that has torch and nothing else of
the study's, offline, and the README's "Using the kernels elsewhere" example run there.

torch is not downloaded or reinstalled: the fresh environment gets a `.pth` file naming a folder of links to the
installed torch and to what torch and normlab require (numpy, sympy, ...), found from their metadata. So it sees
exactly those distributions, as a user who installed torch first would. Deselect with `-m "not packaging"`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from normlab.study import paths

pytestmark = pytest.mark.packaging

SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src")
STUDY_ONLY = ("transformers", "pandas", "matplotlib", "papermill", "triton", "tqdm")


def readme_example() -> str:
    """The first Python block of the README's "Using the kernels elsewhere" section."""
    section = (paths.ROOT / "README.md").read_text().split("## Using the kernels elsewhere", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def requirement_closure(names) -> list[metadata.Distribution]:
    """These distributions and everything they require (environment markers evaluated, no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def link_distributions(dists, folder: Path) -> None:
    """Link each distribution's top-level files and folders (its packages, .libs and .dist-info) into `folder`."""
    folder.mkdir()
    for dist in dists:
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops - {"..", "__pycache__"}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{command[:4]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy: the build writes build/ and *.egg-info, which the checkout keeps for itself
    source.mkdir()
    for name in SOURCES:
        (shutil.copytree if (paths.ROOT / name).is_dir() else shutil.copy2)(paths.ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(tmp / "dist"), str(source)])
    (wheel,) = (tmp / "dist").glob("normlab-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    link_distributions(requirement_closure(["torch", "numpy"]), tmp / "torch-only")
    (site / "torch-only.pth").write_text(str(tmp / "torch-only") + "\n")
    # The lock's pip installs into the fresh interpreter (--python): no pip of its own is needed there.
    _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    shown = _run([*pip, "--python", str(python), "show", "normlab"]).stdout
    return python, shown


def test_the_installed_wheel_carries_its_licence_and_metadata(fresh_venv):
    python, shown = fresh_venv
    print(shown)
    fields = dict(line.split(": ", 1) for line in shown.splitlines() if ": " in line)
    assert fields["Name"] == "normlab" and fields["Version"] == metadata.version("normlab")
    assert fields["License-Expression"] == "MIT" and fields["Author"] == "the normlab authors"
    assert set(fields["Requires"].split(", ")) == {"torch", "numpy"}
    licence = _run([str(python), "-c", "from importlib import metadata; print(metadata.files('normlab'))"]).stdout
    assert "LICENSE" in licence


def test_the_readme_example_runs_in_the_fresh_environment(fresh_venv, tmp_path):
    python, _ = fresh_venv
    probe = (
        "import importlib.util, normlab, torch\n"
        f"print(normlab.__version__, normlab.__file__, [m for m in {STUDY_ONLY!r} if importlib.util.find_spec(m)])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NORMLAB_ROOT")}
    env["NORMLAB_CACHE_DIR"] = str(tmp_path / "cache")  # the C++ kernel is built on first use, as for a user
    version, location, present = _run([str(python), "-c", probe], env=env, cwd=tmp_path).stdout.split(" ", 2)
    assert version == metadata.version("normlab")
    assert location.startswith(str(python.parents[1])), f"normlab was imported from {location}, not the wheel"
    assert present.strip() == "[]", f"the fresh environment has the study's packages: {present}"
    done = _run([str(python), "-c", readme_example()], env=env, cwd=tmp_path)
    assert 0.9 < float(done.stdout.strip().removeprefix("tensor(").rstrip(")")) < 1.1, done.stdout

"""The registered design (data/design.toml) is read when a value is needed, never when a module is imported (issue
56): importing every module of normlab.analysis and normlab.study, in a fresh interpreter whose design readers all
refuse, reads nothing. A chapter's registered pairs are read when a profile is looked up (`lookup_profile` reads
the table's `ReadAtLookup` entries), its thresholds inside the function that uses them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# Run in a fresh interpreter: the test session has long since imported the package. Every way to the design is
# refused before any module that could read it is imported: its loader and parsers, and the file itself (so that a
# reader that bypasses them is caught too).
PROBE = textwrap.dedent(
    """
    import builtins, importlib, io, json, os, pkgutil, traceback

    from normlab.study import paths

    DESIGN = os.path.realpath(paths.ROOT / "data" / "design.toml")


    class DesignReadAtImport(RuntimeError):
        pass


    def refuse(what):
        def reader(*args, **kwargs):
            raise DesignReadAtImport(f"{what} called while importing")

        return reader


    opened = builtins.open


    def guarded_open(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(file)) == DESIGN:
            raise DesignReadAtImport(f"{file} opened while importing")
        return opened(file, *args, **kwargs)


    builtins.open = io.open = guarded_open

    from normlab.study import design, multiplicity

    design.load = refuse("normlab.study.design.load")
    design.parse = refuse("normlab.study.design.parse")
    design._cached = refuse("normlab.study.design._cached")
    multiplicity.parse = refuse("normlab.study.multiplicity.parse")

    import normlab.analysis
    import normlab.study

    imported, failed = [], {}
    for package in (normlab.analysis, normlab.study):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                importlib.import_module(module.name)
                imported.append(module.name)
            except BaseException:
                failed[module.name] = traceback.format_exc(limit=-4)
    print(json.dumps({"imported": imported, "failed": failed}))
    """
)


def test_importing_analysis_and_study_reads_no_design():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["failed"], "\n\n".join(f"{name}:\n{trace}" for name, trace in report["failed"].items())
    # the walk reached the chapters and the study's own modules, not an empty package
    assert {"normlab.analysis.quality.profiles", "normlab.analysis.speed.paper", "normlab.study.run"} <= set(
        report["imported"]
    )

"""Functions of the backends renamed in normlab 0.2, each answered with its new name.

For one release `backend_module.old_name` fails with an AttributeError naming the new one (a module-level
`__getattr__`), rather than a bare "has no attribute". `from module import old_name` still gets Python's
own ImportError.
"""

from __future__ import annotations


def renamed_attributes(module_name: str, renames: dict[str, str]):
    """A module `__getattr__` that answers each old name in `renames` with the new one."""

    def __getattr__(name: str):
        if name in renames:
            raise AttributeError(f"{module_name}.{name} was renamed {renames[name]} in normlab 0.2; use that")
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__

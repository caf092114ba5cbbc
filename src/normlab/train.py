"""`python -m normlab.train`: the command-line trainer (`normlab.gpt.cli`); the loop lives in `normlab.gpt.train`.

A thin entry point, so that running it as a script does not load the training loop a second time.
"""

import warnings

from normlab.gpt.cli import main


def __getattr__(name: str):
    # Before 0.2 the loop lived here: `from normlab.train import train` still works for one release.
    from normlab.gpt import train as loop

    if not hasattr(loop, name):
        raise AttributeError(f"module 'normlab.train' has no attribute {name!r}")
    warnings.warn(f"normlab.train.{name} moved to normlab.gpt.train.{name}", DeprecationWarning, stacklevel=2)
    return getattr(loop, name)


if __name__ == "__main__":
    main()

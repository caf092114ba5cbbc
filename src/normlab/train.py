"""`python -m normlab.train`: the command-line trainer (`normlab.cli_train`); the loop lives in `normlab.training`.

A thin entry point, so that running it as a script does not load the training loop a second time.
"""
from normlab.cli_train import main

if __name__ == "__main__":
    main()

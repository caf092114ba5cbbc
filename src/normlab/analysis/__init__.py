"""The chapters' analyses: one module per chapter, returning findings; helpers several chapters use are in `shared/`."""

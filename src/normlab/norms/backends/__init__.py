"""The implementations behind `normlab.norms.functional`, one module or package per backend."""

"""Shared test setup. Kept minimal: several test modules rely on it.

Triton kernels run on CPU only in Triton's interpreter, which must be switched
on before triton defines any kernel, i.e. before the first import. setdefault
lets a GPU run override it (TRITON_INTERPRET=0 pytest ...).
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

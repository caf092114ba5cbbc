"""The norm library: LayerNorm, RMSNorm and DyT, specified in float64 and implemented by several backends.

It needs only torch and numpy (Triton for the `triton` backend), and other projects import it alone:

- `reference`: the specification every backend is tested against;
- `validation`: the argument checks and dtype rules every backend shares;
- `functional` and `modules`: the public API (`rms_norm`, `layer_norm`, `RMSNorm`, `LayerNorm`);
- `dyt`: Dynamic Tanh, the norm-free alternative;
- `backends/`: composite (PyTorch ops), compiled (`torch.compile`), triton (GPU kernels), cpp (a CPU kernel);
- `huggingface`: swapping the norms of a `transformers` model for these.
"""

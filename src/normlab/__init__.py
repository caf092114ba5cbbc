"""normlab: tested LayerNorm and RMSNorm kernels, and the study that compares them."""
from .dyt import DyT, dyt, dyt_reference
from .functional import BACKENDS, layer_norm, rms_norm
from .modules import LayerNorm, RMSNorm
from .reference import layer_norm_reference, rms_norm_reference

__all__ = ["BACKENDS", "DyT", "dyt", "dyt_reference", "LayerNorm", "RMSNorm", "layer_norm", "layer_norm_reference", "rms_norm", "rms_norm_reference"]
__version__ = "0.1.0"

"""Stand-in for torchvision on a CPU-torch venv (oracle only).

PyPI's torchvision wheels link libtorch_cuda, so none loads with the CPU torch 2.13.0 build, and
sglang.srt.configs imports torchvision.transforms at import time (multimodal helpers). The radix
cache never calls it. transformers' availability probe is resolved first (cached False), then empty
modules are put into sys.modules, so transformers keeps treating torchvision as absent.
"""

import enum
import sys
import types


def install() -> None:
    try:
        import torchvision  # noqa: F401  (a working real one wins)

        return
    except Exception:
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
    from transformers.utils import import_utils as iu

    assert not iu.is_torchvision_available()

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        BOX = "box"
        HAMMING = "hamming"
        LANCZOS = "lanczos"

    def _unavailable(*a, **k):
        raise RuntimeError("torchvision stub: not available in this venv")

    def _lazy(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _unavailable

    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0.0+stub"
    tr = types.ModuleType("torchvision.transforms")
    fn = types.ModuleType("torchvision.transforms.functional")
    fn.InterpolationMode = InterpolationMode
    fn.__getattr__ = _lazy
    tr.functional = fn
    tr.InterpolationMode = InterpolationMode
    tr.__getattr__ = _lazy
    tv.transforms = tr
    io = types.ModuleType("torchvision.io")  # sglang <= 0.5.15 imports decode_jpeg at import time
    io.__getattr__ = _lazy
    tv.io = io
    tv.__getattr__ = _lazy
    for m in (tv, tr, fn, io):
        sys.modules[m.__name__] = m

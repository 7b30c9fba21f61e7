"""`sort_kernels.cu` built for the host (-DHPA_HOST: each kernel a plain loop), launched
through ctypes: what the tests run `sort_device.FusedSteps` with where there is no GPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.prefixes.sort_device import source_text


class HostKernels:
    def __init__(self, folder: Path) -> None:
        compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            raise RuntimeError("no C compiler to build sort_kernels.cu for the host")
        source = folder / "sort_kernels.c"
        source.write_text(source_text())
        library = folder / "sort_kernels.so"
        subprocess.run(
            [
                compiler,
                "-DHPA_HOST",
                "-O1",
                "-Wall",
                "-Werror",
                "-shared",
                "-fPIC",
                "-o",
                str(library),
                str(source),
            ],
            check=True,
            capture_output=True,
        )
        self.library = ctypes.CDLL(str(library))
        self.launched: list[str] = []

    def launch(self, name: str, count: int, *args: Any) -> None:
        if count <= 0:
            return
        self.launched.append(name)
        getattr(self.library, name)(*(_argument(a) for a in args))


def _argument(value: Any):
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous:
            raise ValueError("kernels take contiguous arrays")
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.uint64):
        return ctypes.c_ulonglong(int(value))
    if isinstance(value, np.int64):
        return ctypes.c_longlong(int(value))
    raise TypeError(f"a kernel argument of type {type(value).__name__}")

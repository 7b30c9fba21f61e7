"""The build steps pyproject.toml cannot state: the C kernels, and numba's kernels compiled
into the package.

Two loops are C extensions, built with the package: the token-array scanner of `hpa ingest`
(`analyzer/traces/token_scan_loop.c`) and the radix trees of `hpa match` and the unbounded
replays (`analyzer/prefixes/radix_loop.c`). They import in a millisecond, where numba costs
every process its import and its kernel's load (0.3-0.6 s and 115-160 MiB). They are
optional: where no C compiler is found, the install goes on and those commands take their
NumPy paths (the same answers, slower).

After the sources are copied into the build folder, `python -m analyzer.kernels` runs
there, so numba writes each remaining kernel's machine code (the vLLM replay loops, the
capacity curve) into that copy's `__pycache__` folders and the wheel carries it: an
installed `hpa` loads those kernels instead of compiling them at first use
(docs/contributing.md, "Compiled kernels"). Editable installs skip it (`make install` runs
it in the checkout); HPA_BUILD_KERNELS=0 skips it too.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

NATIVE = [
    Extension(
        f"analyzer.{name}",
        sources=[f"analyzer/{name.replace('.', '/')}.c"],
        include_dirs=["analyzer"],
        depends=["analyzer/native.h"],
        optional=True,
    )
    for name in ("traces.token_scan_loop", "prefixes.radix_loop")
]


class BuildWithKernels(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode or os.environ.get("HPA_BUILD_KERNELS") == "0":
            return
        build_lib = Path(self.build_lib).resolve()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
        # pip's isolated build environment is on PYTHONPATH: the copy goes first
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(build_lib), env.get("PYTHONPATH")]))
        subprocess.run(
            [sys.executable, "-m", "analyzer.kernels"], cwd=build_lib, env=env, check=True
        )


setup(ext_modules=NATIVE, cmdclass={"build_py": BuildWithKernels})

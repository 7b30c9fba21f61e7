"""The one build step pyproject.toml cannot state: compile the kernels into the package.

After the sources are copied into the build folder, `python -m analyzer.kernels` runs there,
so numba writes each kernel's machine code into that copy's `__pycache__` folders and the
wheel carries it: an installed `hpa` loads its kernels instead of compiling them at first
use (docs/contributing.md, "Compiled kernels"). Editable installs skip it (`make install`
runs it in the checkout); HPA_BUILD_KERNELS=0 skips it too.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


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


setup(cmdclass={"build_py": BuildWithKernels})

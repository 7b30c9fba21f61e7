"""pytest against the C loops of another build: `make asan`'s, compiled with AddressSanitizer
and UBSan into a scratch folder, while the checkout keeps its own in-place build.

    python tools/asan/run_tests.py BUILD_DIR [pytest arguments...]

Each extension of `analyzer.kernels.NATIVE` is loaded from BUILD_DIR (where `setup.py
build_ext --build-lib BUILD_DIR` put it) into `sys.modules` before anything imports it, so
`from analyzer.prefixes import radix_loop` and the like find that build instead of the
checkout's (a missing one is an error, not a silent fall-back). The process needs the
sanitizer's runtime loaded first: the Makefile's `asan` target sets LD_PRELOAD.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def load_native(build: Path) -> list[str]:
    """Load every C extension of the package from `build`; the files loaded."""
    from analyzer.kernels import NATIVE

    files = []
    for name in NATIVE.values():
        *package, leaf = name.split(".")
        found = [
            path
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if (path := build.joinpath(*package, leaf + suffix)).is_file()
        ]
        if not found:
            raise SystemExit(f"Error: {name}: not built in {build}")
        spec = importlib.util.spec_from_file_location(name, found[0])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        files.append(str(found[0]))
    return files


def main() -> int:
    build = Path(sys.argv[1]).resolve()
    files = load_native(build)
    from analyzer.prefixes import radix
    from analyzer.traces import token_scan

    used = {radix.radix_loop.__file__, token_scan.token_scan_loop.__file__}
    if used != set(files):
        raise SystemExit(f"Error: the C loops came from {sorted(used)}, not {build}")
    print(f"C loops from {build}: {', '.join(Path(f).name for f in files)}")
    import pytest

    return pytest.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())

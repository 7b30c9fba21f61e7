"""The data files shipped inside the package, under `analyzer/schemas/`: the policy presets
(`policies/<name>.json`), the model presets (`models/<name>.json`) and the JSON Schemas of a
policy and of a trace record.

They are found with `importlib.resources`, never by a path relative to a source checkout, so
a wheel, an install from the sdist and an editable install all read the same files (a path
like `parents[2] / "schemas"` only exists in a clone). Only the `Traversable` API is used
(`iterdir`, `name`, `read_text`, `/`): a package imported from a zip has no `glob` or `stem`.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from analyzer.errors import ConfigError

# The folder itself: a pathlib.Path for a package on disk, a zipfile.Path from a zip.
SCHEMAS: Traversable = resources.files("analyzer") / "schemas"


def preset_names(kind: str) -> list[str]:
    """The `<name>` of every `analyzer/schemas/<kind>/<name>.json` (kind: "policies" or
    "models"), sorted. A missing folder is a broken install, said in one line: the listing
    must never come back empty without a reason."""
    folder = SCHEMAS / kind
    if not folder.is_dir():
        raise ConfigError(
            f"presets missing: no analyzer/schemas/{kind}/ in the installed package; "
            "reinstall hybrid-prefix-analyzer"
        )
    return sorted(
        f.name.removesuffix(".json") for f in folder.iterdir() if f.name.endswith(".json")
    )


def preset_text(kind: str, name: str) -> str:
    """The text of the preset `analyzer/schemas/<kind>/<name>.json` (one of `preset_names`)."""
    return (SCHEMAS / kind / f"{name}.json").read_text(encoding="utf-8")

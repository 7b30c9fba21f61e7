"""`hpa sweep`'s printed table with a host KV tier: a point's host hit ratio and the requests
that waited for a load, only where a point of the sweep has a tier."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from tests.host_trace import BASE, MODEL, host_trace_db


@pytest.fixture(scope="module")
def host_db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep_host")
    (tmp / "model.json").write_text(json.dumps(MODEL))
    return host_trace_db(tmp), tmp / "model.json"


@pytest.mark.parametrize(
    ("vary", "tail"),
    [
        # the last columns: 1 GiB (32 slots) gives back both evicted prefixes (128 of 400
        # tokens) and the two requests that loaded them waited; 2 slots keep nothing
        (
            "host_tier_gib=0,1",
            [["one_pass", "host_hit_ratio", "host_waited"], ["False", "0.00", "0"],
             ["False", "0.32", "2"]],
        ),
        (
            "host_tier_chunks=2,32",
            [["one_pass", "host_hit_ratio", "host_waited"], ["False", "0.00", "0"],
             ["False", "0.32", "2"]],
        ),
        # no tier: the table as before (the GPU pool of 16 blocks keeps both prefixes)
        ("num_blocks=8,16", [["caches", "total_gib", "one_pass"], ["1", "0.25", "True"],
                             ["1", "0.50", "True"]]),
    ],
)  # fmt: skip
def test_host_columns_only_where_a_point_has_a_tier(tmp_path, host_db, vary, tail):
    db, model = host_db
    copy = tmp_path / "h.duckdb"
    copy.write_bytes(db.read_bytes())
    sets = [a for k, v in BASE.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    args = ["sweep", "--db", str(copy), "--jobs", "1", *sets, "--set", f"model={model}"]
    r = CliRunner().invoke(cli, [*args, "--vary", vary])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [line.split()[-3:] for line in (lines[0], *lines[2:4])] == tail
    assert [line.split()[7] for line in lines[2:4]] == ["0.00", "0.32"]  # useful_hit_ratio

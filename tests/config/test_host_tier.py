"""`config.host_tier.never_stored_words`: what a host tier never stored, by kind, in the words
hpa replay's host line and hpa compare's per-side line print. Every figure is tokens, so
each kind reads as tokens: the sparse kind said '107,184 sparse states not kept' (on the
bundled mixed sample, qwen3.5-4b, 100 blocks, 8 GiB tier), as if it counted states."""

from __future__ import annotations

import pytest

from analyzer.config.host_tier import never_stored_words


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"host_never_stored_tokens": 0}, "0 never stored"),
        (
            {"host_never_stored_tokens": 107_184, "host_never_stored_sparse_tokens": 107_184},
            "107,184 never stored (107,184 with no sparse state kept)",
        ),
        (
            {
                "host_never_stored_tokens": 1_360,
                "host_never_stored_no_slot_tokens": 1_040,
                "host_never_stored_decode_tokens": 272,
                "host_never_stored_sparse_tokens": 48,
            },
            "1,360 never stored (1,040 dropped for want of a slot, 272 past a prompt under "
            "prompt-only, 48 with no sparse state kept)",
        ),
    ],
)
def test_never_stored_words(row, words):
    assert never_stored_words(row) == words

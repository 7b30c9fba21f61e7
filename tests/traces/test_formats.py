"""The CLI's list of formats is the readers' list."""

from analyzer.traces.formats import FORMATS
from analyzer.traces.readers import READERS


def test_cli_formats_are_the_readers():
    assert FORMATS == tuple(READERS)


def test_every_adapter_is_one_entry_of_one_list():
    """(issue 34 item 7: an adapter was registered in 8 places across 2 files)"""
    from analyzer.traces.adapters import NAMES, adapters

    found = adapters()
    assert [a.name for a in found] == list(NAMES)
    assert all(a.record or a.text for a in found), "each adapter is recognised somehow"
    assert NAMES[-1] == "mooncake"  # the loosest test, tried last

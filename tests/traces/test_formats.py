"""The CLI's list of formats is the readers' list."""

from analyzer.traces.formats import FORMATS
from analyzer.traces.readers import READERS


def test_cli_formats_are_the_readers():
    assert FORMATS == tuple(READERS)

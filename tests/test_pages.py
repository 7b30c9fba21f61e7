"""analyzer.pages: scratch arrays on plain pages are zeroed, shaped and private to a process."""

import os

import numpy as np
import pytest

from analyzer.pages import plain_empty


@pytest.mark.parametrize(
    ("shape", "dtype"), [(0, np.int32), (5, np.uint8), ((3, 4), np.int64), ((2, 0), np.int32)]
)
def test_an_array_has_its_shape_and_type_and_starts_zeroed(shape, dtype):
    array = plain_empty(shape, dtype)
    assert array.shape == np.empty(shape).shape
    assert array.dtype == np.dtype(dtype)
    assert not array.any()
    assert array.flags.writeable


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_into_its_own_copy():
    array = plain_empty(1 << 20, np.int32)
    pid = os.fork()
    if pid == 0:  # the child: write, then end without running the test session's exit
        array[:] = 7
        os._exit(0)
    os.waitpid(pid, 0)
    assert not array.any()

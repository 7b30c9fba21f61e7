"""traces.threads.ordered_map: results in order, errors where they belong, memory bounded."""

import threading
import time

import pytest

from analyzer.traces.threads import default_workers, ordered_map


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_results_come_in_the_order_of_the_items(workers):
    def slow_for_small(x):
        time.sleep(0.001 * (10 - x % 10))  # early items finish last
        return x * x

    assert list(ordered_map(slow_for_small, range(40), workers=workers)) == [
        x * x for x in range(40)
    ]


@pytest.mark.parametrize("workers", [1, 3])
def test_an_error_is_raised_where_its_result_would_have_come(workers):
    def fails_at_five(x):
        if x == 5:
            raise ValueError("five")
        return x

    got = []
    with pytest.raises(ValueError, match="five"):
        for value in ordered_map(fails_at_five, range(10), workers=workers):
            got.append(value)
    assert got == [0, 1, 2, 3, 4]


def test_an_error_of_the_items_themselves_is_raised_in_the_callers_thread():
    def items():
        yield 1
        raise OSError("cut")

    with pytest.raises(OSError, match="cut"):
        list(ordered_map(lambda x: x, items(), workers=2))


def test_at_most_workers_plus_one_items_are_taken_ahead():
    taken = []
    lock = threading.Lock()

    def items():
        for i in range(100):
            with lock:
                taken.append(i)
            yield i

    stream = ordered_map(lambda x: x, items(), workers=2)
    assert next(stream) == 0
    assert len(taken) <= 3
    stream.close()  # waits for the items in hand: no thread is left running
    assert not [t for t in threading.enumerate() if t.name.startswith("hpa-parse")]


def test_default_workers_is_one_a_core_up_to_four():
    assert 1 <= default_workers() <= 4

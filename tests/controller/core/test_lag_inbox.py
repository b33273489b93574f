from assignors import TopicPartition
from controller.core.lag_inbox import LagInbox

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def test_absorbs_a_batch_a_call_oldest_first_with_its_arrival() -> None:
    inbox = LagInbox(batch=2, smoothing=1.0)
    inbox.put({T0: 10, T1: 20}, 1.0, bound=100)
    inbox.put({T2: 30}, 2.0, bound=100)
    assert len(inbox) == 3
    assert inbox.oldest() == 1.0
    assert inbox.absorb() == ({T0: 10, T1: 20}, 1.0)
    assert inbox.oldest() == 2.0
    assert inbox.absorb() == ({T2: 30}, 2.0)
    assert len(inbox) == 0
    assert inbox.absorb() is None
    assert inbox.oldest() is None


def test_a_batch_can_end_inside_one_poll() -> None:
    inbox = LagInbox(batch=1, smoothing=1.0)
    inbox.put({T0: 1, T1: 2}, 5.0, bound=100)
    assert inbox.absorb() == ({T0: 1}, 5.0)
    assert len(inbox) == 1
    assert inbox.absorb() == ({T1: 2}, 5.0)


def test_readings_are_smoothed_and_forgetting_weighs_zero() -> None:
    inbox = LagInbox(batch=10, smoothing=0.5)
    inbox.put({T0: 100}, 0.0, bound=100)
    inbox.absorb()
    inbox.put({T0: 200}, 1.0, bound=100)
    assert inbox.absorb() == ({T0: 150}, 1.0)
    inbox.put({T0: None, T1: None}, 2.0, bound=100)
    assert inbox.absorb() == ({T0: 0}, 2.0)  # T1 never reported: nothing to forget
    assert inbox.smoothed == {}


def test_past_the_bound_only_the_latest_reading_of_each_partition_stays() -> None:
    inbox = LagInbox(batch=10, smoothing=1.0)
    for at in range(10):
        inbox.put({T0: at, T1: at}, float(at), bound=5)
    assert len(inbox) <= 5 + 2
    assert inbox.oldest() == 0.0  # the kept readings count from the oldest arrival
    assert inbox.absorb() == ({T0: 9, T1: 9}, 0.0)

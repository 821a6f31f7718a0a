"""traffic.task_draw: stratified deals every task its share, whatever the concurrency."""

import pytest

from tokenswarm.workload.draw import StratifiedDraw


@pytest.mark.parametrize("weights", [[1, 1], [9, 1], [2, 2, 1, 1], [0.5, 3, 1.5]])
def test_after_any_number_of_requests_each_task_is_within_one_of_its_share(weights):
    deal = StratifiedDraw(weights, offset=5)
    counts = [0] * len(weights)
    total = sum(weights)
    for k in range(1, 500):
        counts[deal.next_index()] += 1
        for i, w in enumerate(weights):
            assert abs(counts[i] - k * w / total) <= 1.0, (k, counts)


def test_a_sender_deals_the_same_sequence_every_run_and_senders_start_at_different_tasks():
    def seq(offset: int) -> list[int]:
        deal = StratifiedDraw([2, 1, 1], offset=offset)
        return [deal.next_index() for _ in range(8)]

    assert seq(3) == seq(3)
    assert len({seq(o)[0] for o in range(4)}) > 1


def test_a_task_of_weight_zero_is_never_dealt_and_no_positive_weight_is_an_error():
    deal = StratifiedDraw([1, 0, 1])
    assert 1 not in {deal.next_index() for _ in range(50)}
    with pytest.raises(ValueError):
        StratifiedDraw([0, 0])

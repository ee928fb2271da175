"""A backup's held confirms are counted as its guards hold and release them
(broker/ha/queue_guard.py ``HeldTally``): the primary's status, read at every agent check,
summed 10,000 guards (a loop step of 100.7 ms in the scale soak at load 25). Hypothesis:
whatever is published, acknowledged, consumed, deleted and declared again, the count is
the sum over the backup's guards, and the sum of what its guards still hold while a
dropped backup's guards are released a slice at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.confirms import PublisherConfirms
from broker.ha.primary import Primary
from tests.ha.test_primary import publish, setup

QUEUES = ("q1", "q2")
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["publish", "ack", "consume", "redeclare", "guard"]),
        st.sampled_from(QUEUES),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=40,
)


def _sum(primary: Primary, backup: str) -> int:
    return sum(g.held for g in primary.backups[backup].guards.values())


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_the_count_is_the_sum_over_the_guards(actions: list[tuple[str, str, int]]) -> None:
    _, vhost, _driver, primary = setup({"b1": "h1:5672"})
    confirms = PublisherConfirms()
    backup = primary.backups["b1"]
    for action, name, pick in actions:
        queue = vhost.queues.get(name)
        if action == "publish" and queue is not None:
            publish(vhost, name, confirms)
        elif action == "ack" and name in backup.guards:
            positions = backup.guards[name].held_positions()
            if positions:
                backup.guards[name].acknowledged(positions[pick % len(positions)])
        elif action == "consume" and queue is not None and queue.message_count:
            queue.purge()
        elif action == "redeclare" and queue is not None:
            vhost.delete_queue(name)
            primary.queue_declared(vhost.declare_queue(name))
        elif action == "guard" and queue is not None:
            backup.guard(queue)
        assert backup.held() == _sum(primary, "b1"), action
        assert primary.held_confirms() == backup.held()


def test_a_dropped_backups_count_falls_as_its_guards_are_released() -> None:
    _, vhost, _driver, primary = setup({"b1": "h1:5672"})
    for i in range(1200):
        primary.queue_declared(vhost.declare_queue(f"s{i}"))
    backup = primary.backups["b1"]
    for i in range(1200):
        backup.guard(vhost.queues[f"s{i}"])
        publish(vhost, f"s{i}", PublisherConfirms())
    assert backup.held() == _sum(primary, "b1") >= 1200
    steps = backup.cancel_steps(size=500)
    next(steps)
    assert 0 < backup.held() < 1200  # the guards left hold what they hold until their slice
    for _ in steps:
        pass
    assert backup.held() == 0

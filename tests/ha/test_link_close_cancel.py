"""A backup link's task is cancelled whenever it is stopped, even while closing a client.

The CI failure of ``test_every_confirmed_message_survives_primary_sigkill
[promoted-backup-lagging]``: a promotion's ``DropLink`` cancels the link task and waits for
it. Resumed from SIGSTOP, the backup sees its dead primary's EOF and the promote request at
once, so the cancel can land while the session's ``finally`` closes the lost client. Closed
with ``asyncio.wait_for``, Python 3.11 returned normally from a wait cancelled just as the
close ended: the cancellation was lost, the task dialled on, and the promotion waited for it
for ever (the HTTP promote timed out). Here the cancel is put at every loop step after the
broker's close-ok, the step where the close ends included; a real broker, a real client.
"""

from __future__ import annotations

import asyncio

from broker.amqp.client import connect
from broker.ha.backup import BackupLink
from tests.broker_process import BrokerProcess

#: Loop steps swept after the close-ok: the close ends within a few of them.
STEPS = 40


async def _cancel_during_close(port: int, steps: int) -> bool | None:
    """Close a client as the link does, cancel ``steps`` loop steps after the broker's
    close-ok: True if the cancellation came through, False if it was lost, None if the
    close had ended before the cancel."""
    client = await connect("127.0.0.1", port, user="guest", password="guest")
    link = BackupLink.__new__(BackupLink)  # _close_client uses nothing of the instance
    closing = asyncio.ensure_future(link._close_client(client))
    while client.close_reason is None:  # close-ok read, or the close ran out of time
        await asyncio.sleep(0)
    for _ in range(steps):
        await asyncio.sleep(0)
    if closing.done():
        return None
    closing.cancel()
    try:
        await closing
    except asyncio.CancelledError:
        return True
    return False


def test_a_cancel_while_the_link_closes_its_client_is_never_lost(
    broker: BrokerProcess,
) -> None:
    async def sweep() -> dict[int, bool]:
        outcomes: dict[int, bool] = {}
        for steps in range(STEPS):
            outcome = await _cancel_during_close(broker.port, steps)
            if outcome is None:
                break
            outcomes[steps] = outcome
        return outcomes

    outcomes = asyncio.run(sweep())
    assert outcomes, "the close ended before any cancel: nothing was checked"
    lost = [steps for steps, came_through in outcomes.items() if not came_through]
    assert not lost, f"cancellations lost {lost} steps after close-ok"

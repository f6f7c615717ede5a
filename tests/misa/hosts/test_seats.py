"""Which starting task of the hosts' job serves (misa/hosts/seats.py): after an executor loss the survivors' slots
go to the query's tasks, not to standbys; a task that left starts again when there is room, or at once when its
partition needs a host."""

from __future__ import annotations

from misa.hosts.seats import Seats

# two partitions, a host and a standby each: tasks 0, 1 are partition 0's, tasks 2, 3 partition 1's


def _seats(slots: list[int], standbys: dict[int, int], serving: list[int]) -> Seats:
    seats = Seats(2, lambda task: divmod(task, 2), lambda: slots[0])
    seats.held = lambda: (dict(standbys), serving[0])
    return seats


def test_every_task_serves_while_the_hosts_start():
    seats = Seats(2, lambda task: divmod(task, 2), lambda: 0)
    assert all(seats.serves(task) for task in range(4))


def test_after_a_loss_a_standby_that_would_take_the_querys_last_slot_leaves_and_starts_again_when_there_is_room():
    # an executor of 5 slots survives with the 2 hosts (its own, and the standby that took over): 3 free
    slots, standbys, serving = [5], {0: 0, 1: 0}, [2]
    seats = _seats(slots, standbys, serving)
    assert seats.serves(1)  # partition 0's standby: 2 slots stay free
    standbys[0], serving[0] = 1, 3
    assert seats.serves(3)  # partition 1's: 1 stays free for the query
    standbys[1], serving[0] = 1, 4
    assert not seats.serves(1)  # a third standby task of partition 0 is not wanted
    slots[0], standbys[0], serving[0] = 4, 0, 3  # a core fewer, partition 0's standby lost: its task again
    assert not seats.serves(1)  # it would take the query's last slot
    assert seats.to_start_again() == []  # no room yet
    slots[0] = 10  # the new executor registered
    assert seats.to_start_again() == [1]  # one of its two that left: the partition lacks one standby
    assert seats.to_start_again() == []  # it is coming: not twice


def test_a_partition_that_awaits_a_new_host_gets_its_task_that_left_and_its_next_task_serves():
    slots, standbys, serving = [4], {0: 0, 1: 1}, [3]
    seats = _seats(slots, standbys, serving)
    assert not seats.serves(0)  # it would take the last slot
    assert seats.awaiting(0) == [0]  # partition 0's host lost without a standby: its task that left starts again
    assert seats.serves(0)
    seats.found(0)
    assert not seats.serves(1)


def test_without_standbys_every_task_serves():
    seats = Seats(1, lambda task: (task, 0), lambda: 0)
    seats.held = lambda: ({}, 4)
    assert all(seats.serves(task) for task in range(4))


def test_a_task_spark_runs_again_does_not_count_as_one_started_again():
    # partition 0's standby task 1 left, then started again when room came (coming, its slot kept); meanwhile Spark
    # ran partition 0's host task 0 again (its executor lost): that is not task 1 arriving, and the slot stays kept
    slots, standbys, serving = [4], {0: 0, 1: 1}, [3]
    seats = _seats(slots, standbys, serving)
    assert not seats.serves(1)
    slots[0] = 6
    assert seats.to_start_again() == [1]
    assert seats.awaiting(0) == []  # nothing left to start: the host's next task serves
    assert seats.serves(0)
    seats.found(0)
    slots[0], standbys[1] = 5, 0  # a core fewer; partition 1 lost its standby
    assert not seats.serves(3)  # it would take the slot kept for task 1 (counted as arrived before the fix)
    assert seats.serves(1)  # task 1 arrives: its slot was kept

"""The group board: slots for actors, complete groups or single episodes for the learner, and
admission control that bounds staleness per sample."""

import threading

from practicum.envs.base import Task
from practicum.episode import Episode, Turn
from practicum.runtime.cursor import TaskCursor
from practicum.runtime.groups import GroupBoard, group_id

TASKS = [Task(f"t{i}") for i in range(3)]
STOP = threading.Event()


def _episode(gid: str, slot: int = 0, version: int = 0) -> Episode:
    return Episode(
        gid.split("/", 1)[1], gid, [1], [Turn([2], [-0.1], version)], info={"slot": slot}
    )


def _finish(board, a, position=0):
    board.finish(a, _episode(a.group_id, a.slot), position)


def _open_ids(board) -> set[str]:
    return {group_id(index, task_id) for index, task_id, _ in board.open_groups()}


def _blocked(board) -> bool:
    """Whether an actor asking for a slot now would wait."""
    got = []
    t = threading.Thread(target=lambda: got.append(board.next_assignment(STOP)), daemon=True)
    t.start()
    t.join(0.3)
    if t.is_alive():
        board.close()
        t.join(2)
        return True
    return False


def test_admission_caps_open_groups():
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=2, max_open=2, max_staleness=1)
    got = [board.next_assignment(STOP) for _ in range(4)]
    assert [a.slot for a in got] == [0, 1, 0, 1] and len({a.group_id for a in got}) == 2
    for a in got[:2]:
        _finish(board, a)
    assert board.take_group(timeout=1).gid == got[0].group_id  # taking it frees room
    assert [board.next_assignment(STOP).index for _ in range(2)] == [2, 2]
    assert _blocked(board)  # two groups open again, every slot handed out


def test_complete_groups_come_in_completion_order():
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=2)
    a = [board.next_assignment(STOP) for _ in range(4)]  # g0 (a0, a1), g1 (a2, a3)
    for x in (a[0], a[2], a[3]):
        _finish(board, x)
    assert board.take_group(timeout=1).index == 1  # g1 finished first although opened second
    assert board.take_group(timeout=0.05) is None
    _finish(board, a[1])
    assert board.take_group(timeout=1).index == 0


def test_streaming_takes_single_episodes_and_closes_a_group_when_all_are_taken():
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=2)
    a = [board.next_assignment(STOP) for _ in range(3)]  # g0 (slots 0, 1), g1 slot 0
    _finish(board, a[2], position=7)
    _finish(board, a[0], position=8)
    g, pos, e = board.take_episode(timeout=1)
    assert (g.index, pos) == (1, 7)
    assert board.take_episode(timeout=1)[1] == 8
    assert _open_ids(board) == {a[0].group_id, a[2].group_id}  # both still have a member out
    _finish(board, a[1], position=9)
    assert board.take_episode(timeout=1, only={a[0].group_id})[1] == 9
    assert _open_ids(board) == {a[2].group_id}


def test_a_group_is_due_at_its_deadline_and_sealing_stops_new_ones_with_that_deadline():
    # max_staleness 1: a group opened at version v must be trained by the batch at v + 1
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=1, max_open=4, max_staleness=1)
    first = board.next_assignment(STOP)  # opened at version 0
    assert board.due() == set()  # its deadline is version 1
    board.set_version(1)
    second = board.next_assignment(STOP)  # opened at version 1, deadline 2
    assert board.due() == {first.group_id}
    board.seal()  # batch 1 is complete: a group opened now has deadline 2 > 1, still allowed
    assert board.next_assignment(STOP).index == 2
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=1, max_open=4, max_staleness=0)
    board.next_assignment(STOP)
    board.seal()  # max_staleness 0: nothing may open until the next version
    assert _blocked(board)
    board = GroupBoard(TaskCursor(TASKS, seed=0), group_size=1, max_open=4, max_staleness=0)
    board.next_assignment(STOP)
    board.seal()
    board.set_version(1)
    assert board.next_assignment(STOP).index == 1 and second.index == 1


def test_restore_reopens_groups_with_their_members_and_free_slots():
    cursor = TaskCursor(TASKS, seed=0)
    order = [cursor.take_one() for _ in range(3)]
    gids = [group_id(i, t.task_id) for i, t in order]
    cursor.position = 1  # checkpoint: group 0 open (version 3); groups 1 and 2 opened after
    board = GroupBoard(cursor, group_size=2, version=4)
    stored = [
        (5, _episode(gids[0], slot=1), False),  # group 0: slot 1 finished, slot 0 lost
        (6, _episode(gids[2], slot=0), False),
        (7, _episode(gids[2], slot=1), False),
        (8, _episode(gids[2], slot=1), False),
    ]  # a duplicate of slot 1: surplus
    surplus = board.restore([(0, order[0][1].task_id, 3)], stored, {t.task_id: t for t in TASKS})
    assert [p for p, _ in surplus] == [8]
    assert board.take_group(timeout=1).gid == gids[2]  # complete at once
    a = board.next_assignment(STOP)
    assert (a.group_id, a.slot) == (gids[0], 0)  # the lost slot runs again, same seed slot
    assert board.next_assignment(STOP).group_id == gids[1]  # then the cursor, past group 2
    assert (0, order[0][1].task_id, 3) in board.open_groups()  # keeps its opening version


def test_restore_counts_consumed_streaming_members_as_taken():
    cursor = TaskCursor(TASKS, seed=0)
    index, task = cursor.take_one()
    gid = group_id(index, task.task_id)
    board = GroupBoard(cursor, group_size=3)
    board.restore(
        [(index, task.task_id, 0)],
        [(0, _episode(gid, 0), True), (1, _episode(gid, 1), False)],
        {t.task_id: t for t in TASKS},
    )
    assert board.take_episode(timeout=1)[1] == 1
    a = board.next_assignment(STOP)
    assert (a.group_id, a.slot) == (gid, 2)
    _finish(board, a, position=2)
    assert board.take_episode(timeout=1)[1] == 2
    assert gid not in _open_ids(board)  # all three members taken

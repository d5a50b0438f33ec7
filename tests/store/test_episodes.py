from practicum.episode import Episode, Turn
from practicum.store import EpisodeStore


def ep(i: int) -> Episode:
    return Episode(f"t{i}", "g", [1, 2], [Turn([3], [-0.5], 0)], reward=float(i))


def test_append_persists_and_reads_back(tmp_path):
    store = EpisodeStore(tmp_path / "e.jsonl")
    store.append([ep(0), ep(1)])
    store.append([ep(2)])
    again = EpisodeStore(tmp_path / "e.jsonl")
    assert len(again) == 3
    assert [e.reward for e in again.read(1)] == [1.0, 2.0]
    assert [e.reward for e in again.read(0, 1)] == [0.0]


def test_partial_last_line_from_a_crash_is_cut(tmp_path):
    path = tmp_path / "e.jsonl"
    store = EpisodeStore(path)
    store.append([ep(0), ep(1)])
    with open(path, "a") as f:
        f.write(ep(2).to_json()[:25])  # crash mid-write
    reopened = EpisodeStore(path)
    assert len(reopened) == 2
    reopened.append([ep(3)])
    assert [e.reward for e in EpisodeStore(path)] == [0.0, 1.0, 3.0]

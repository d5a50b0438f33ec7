import tarfile

import pytest

from practicum.envs.swe.repo import PristineCache, RepoError, apply_patch, materialize, secret_paths
from tests.envs.swe.toyrepo import toy_instance


def test_materialize_folder_and_archive_give_the_base_state(tmp_path):
    inst = toy_instance(tmp_path)
    materialize(inst, tmp_path / "a")
    assert "a - b" in (tmp_path / "a" / "calc" / "__init__.py").read_text()
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(inst.source, arcname=".")
    from dataclasses import replace

    materialize(replace(inst, source=archive), tmp_path / "b")
    assert (tmp_path / "b" / "calc" / "__init__.py").read_text() == (
        tmp_path / "a" / "calc" / "__init__.py"
    ).read_text()
    assert not (tmp_path / "b" / ".git").exists()


def test_materialize_refuses_non_empty_and_bad_bug_patch(tmp_path):
    inst = toy_instance(tmp_path)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(RepoError, match="not empty"):
        materialize(inst, tmp_path / "full")
    from dataclasses import replace

    bad = replace(inst, bug_patch=inst.bug_patch.replace("a + b", "a * b"))
    with pytest.raises(RepoError, match="bug_patch does not apply"):
        materialize(bad, tmp_path / "c")


def test_apply_patch_reverse_and_cache(tmp_path):
    inst = toy_instance(tmp_path)
    cache = PristineCache()
    try:
        cache.copy_to(inst, tmp_path / "w")
        assert apply_patch(tmp_path / "w", inst.bug_patch, reverse=True).ok
        assert "a + b" in (tmp_path / "w" / "calc" / "__init__.py").read_text()
        assert "a - b" in (cache.tree(inst) / "calc" / "__init__.py").read_text()
    finally:
        cache.close()


def test_secret_paths_skip_folders_holding_the_workdir(tmp_path):
    inst = toy_instance(tmp_path)
    assert set(secret_paths(inst)) == {inst.source, inst.origin}
    assert secret_paths(inst, inst.origin / "work") == [inst.source]

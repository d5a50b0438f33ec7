from practicum.cli import main
from tests.envs.swe.toyrepo import toy_instance


def test_list_show_run_check(tmp_path, capsys):
    inst = toy_instance(tmp_path)
    jsonl = str(inst.origin / "instances.jsonl")
    assert main(["swe", "list", "--instances", jsonl]) == 0
    assert "toy__calc-1" in capsys.readouterr().out
    assert main(["swe", "show", "toy__calc-1", "--instances", jsonl]) == 0
    out = capsys.readouterr().out
    assert "add(2, 3) returns -1" in out and "a + b" not in out
    patch = tmp_path / "fix.diff"
    patch.write_text(inst.patch)
    assert main(["swe", "run", "toy__calc-1", str(patch), "--instances", jsonl]) == 0
    assert "RESOLVED" in capsys.readouterr().out
    patch.write_text("")
    assert main(["swe", "run", "toy__calc-1", str(patch), "--instances", jsonl]) == 1
    assert main(["swe", "check", "--instances", jsonl]) == 0
    assert "gold resolves 1, empty patch resolves 0" in capsys.readouterr().out
    assert main(["swe", "show", "nope", "--instances", jsonl]) == 2


def test_run_rejects_bad_patch_files_in_one_line(tmp_path, capsys):
    inst = toy_instance(tmp_path)
    jsonl = str(inst.origin / "instances.jsonl")
    latin = tmp_path / "latin1.diff"
    latin.write_bytes(inst.patch.replace("+", "+\xe9", 1).encode("latin-1"))
    prose = tmp_path / "notes.txt"
    prose.write_text("I changed calc.add to return a + b.\n")
    for path, problem in (
        (tmp_path / "missing.diff", "does not exist"),
        (latin, "is not UTF-8 text"),
        (prose, "is not a patch"),
        (tmp_path, "is not a file"),
    ):
        capsys.readouterr()
        assert main(["swe", "run", "toy__calc-1", str(path), "--instances", jsonl]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert f"patch file {path} {problem}" in captured.err

from practicum.envs.swe.diffs import file_diff, is_protected, source_only, split_diff


def test_split_and_filter_drops_tests_conftest_config_and_shadows():
    diff = (
        file_diff("pkg/a.py", "x = 1\n", "x = 2\n")
        + file_diff("tests/test_a.py", "t = 1\n", "t = 2\n")
        + file_diff("pkg/conftest.py", None, "c = 1\n")
        + file_diff("setup.cfg", "[a]\n", "[b]\n")
        + file_diff("pkg/b.py", "y = 1", "y = 3")
    )
    blocks = split_diff(diff)
    assert [b.new_path for b in blocks] == [
        "pkg/a.py",
        "tests/test_a.py",
        "pkg/conftest.py",
        "setup.cfg",
        "pkg/b.py",
    ]
    kept, dropped = source_only(diff, test_files=["pkg/b.py"])
    assert [b.new_path for b in split_diff(kept)] == ["pkg/a.py"]
    assert dropped == ["tests/test_a.py", "pkg/conftest.py", "setup.cfg", "pkg/b.py"]


def test_protected_paths():
    assert is_protected("test_x.py") and is_protected("a/x_test.py")
    assert is_protected("sitecustomize.py") and is_protected("x.pth")
    assert is_protected("pytest.py", new_file=True) and is_protected(
        "json/__init__.py", new_file=True
    )
    assert not is_protected("pkg/json.py", new_file=True)
    assert is_protected("pkg/__pycache__/core.cpython-311.pyc") and is_protected("pkg/_x.so")
    assert not is_protected("pkg/core.py") and not is_protected("inflection/__init__.py")


def test_no_final_newline_marker():
    d = file_diff("a.py", "x = 1", "x = 2")
    assert d.count("\\ No newline at end of file") == 2

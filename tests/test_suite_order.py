"""The suite's scheduling list names real files: a renamed slow file would otherwise silently
lose its early start (and the two xdist workers their balance)."""

from tests.conftest import REPO, SLOW_FILES_FIRST


def test_every_file_the_suite_starts_first_exists_once():
    assert [f for f in SLOW_FILES_FIRST if not (REPO / f).is_file()] == []
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)


def test_make_test_runs_two_workers_by_whole_file_in_the_listed_order():
    pytest_rule = (REPO / "Makefile").read_text().split("\npytest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile" in pytest_rule  # module fixtures (engines, fleets) start once
    assert "--no-loadscope-reorder" in pytest_rule  # xdist would sort files by test count

"""The suite's scheduling list names real files: a renamed slow file would otherwise silently
lose its early start (and the two xdist workers their balance)."""

from tests.conftest import REPO, SLOW_FILES_FIRST


def test_every_file_the_suite_starts_first_exists_once():
    assert [f for f in SLOW_FILES_FIRST if not (REPO / f).is_file()] == []
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)


def test_make_pytest_with_workers_runs_them_by_whole_file_in_the_listed_order():
    makefile = (REPO / "Makefile").read_text()
    parallel = makefile.split("\nPARALLEL := ", 1)[1].split("\n", 1)[0]
    assert "-n $(TEST_WORKERS)" in parallel
    assert "--dist loadfile" in parallel  # module fixtures (engines, fleets) start once
    assert "--no-loadscope-reorder" in parallel  # xdist would sort files by test count
    assert "$(BIN)/pytest $(PARALLEL)" in makefile

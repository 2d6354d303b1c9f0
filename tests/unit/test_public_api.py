import runwright as rw
from runwright import errors, runs


def test_all_is_sorted_and_complete():
    assert rw.__all__ == sorted(rw.__all__, key=lambda n: (not n.isupper(), n))
    for name in rw.__all__:
        assert hasattr(rw, name), name


def test_every_error_is_drawn_in_the_errors_docstring():
    for name in errors.__all__:
        assert name in errors.__doc__, f"{name} missing from the tree in errors.py"


def test_transition_table_covers_every_state_and_terminal_states_only_leave_by_retry():
    assert set(runs.TRANSITIONS) == set(runs.RunState)
    for state in runs.TERMINAL_STATES:
        assert runs.TRANSITIONS[state] <= {runs.RunState.QUEUED}
    assert runs.sources_of(runs.RunState.RUNNING) == ("queued",)
    assert runs.sources_of(runs.RunState.QUEUED) == ("dead", "failed", "running")

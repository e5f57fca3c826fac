"""Errors that the CLI turns into one line and exit code 2 (see ``poscli.cli.app.main``)."""


class PoscliError(Exception):
    """A problem with the user's input: the message says what was wrong and what to type."""

    exit_code = 2
    prefix = "error: "


class EnvironmentFailure(PoscliError):
    """Something outside the user's arguments failed (disk, device, network): exit code 1."""

    exit_code = 1


class NotApplicable(PoscliError):
    """A valid request this model cannot answer, e.g. a learned table asked past its last row."""


class Answer(PoscliError):
    """Not a failure: a request that needs no work, answered in one line with exit code 0."""

    exit_code = 0
    prefix = ""

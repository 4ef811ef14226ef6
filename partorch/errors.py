"""The one exception type the command line turns into `error: ...`."""


class PartorchError(Exception):
    """Bad input or set-up: reported as one line, never as a traceback."""

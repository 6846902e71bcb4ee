"""The one exception type that means "the input is wrong", not "the tool is broken"."""


class ExportError(Exception):
    """Bad user input: a missing file, inconsistent geometry, an unsupported model.

    The command line prints the message as one line and exits with status 2; any other
    exception is a bug and keeps its traceback.
    """


class ExportWarning(UserWarning):
    """Something the export could not carry over (e.g. a tokenizer); the .pte is still right."""

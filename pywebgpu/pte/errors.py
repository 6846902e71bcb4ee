"""The one exception the `.pte` reader raises for bad input."""


class PteError(Exception):
    """The input is not a well-formed `.pte` program (or lacks what was asked of it).

    The message names what is wrong and where: byte offset, method, value id, op
    index or field.
    """

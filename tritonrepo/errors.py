"""The one error type of a model repository, for every package that reads or serves one."""


class RepositoryError(Exception):
    """A model repository, one of its models or configs is missing, empty or malformed: what the reader,
    the derivations and the launcher (tritonlocal, which re-exports it) raise."""

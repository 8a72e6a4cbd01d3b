"""The one error type of the repository package."""


class RepositoryError(Exception):
    """A model repository or one of its configs is missing or malformed."""

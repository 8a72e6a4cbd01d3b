"""The one error type of the description package."""


class DescriptionError(Exception):
    """A model description, or a config generated from it, is missing, malformed or inconsistent."""

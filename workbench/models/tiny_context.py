"""The built-in tiny model's context length, apart from :mod:`workbench.models.tiny` (which
imports the model classes) so that preflight and the package can read it cheaply."""

TINY_MAX_POSITIONS = 512  # prompt + completion must fit (checked in preflight)

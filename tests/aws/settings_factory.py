"""A deployment's settings factory as PERDURE_FUNCTION names it, for the entry-point
test: the kit's agent on the environment's resources."""

from __future__ import annotations

from runtimes.actor.testing import kit_config
from runtimes.aws.environment import settings_from_environment
from runtimes.aws.handler import FunctionSettings


def settings() -> FunctionSettings:
    return settings_from_environment(kit_config())

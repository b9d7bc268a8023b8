"""The function's settings from its environment (the variables infra/aws/template.yaml
sets), for a deployment's settings factory::

    # app/perdure_settings.py, named by PERDURE_FUNCTION=app.perdure_settings:settings
    def settings() -> FunctionSettings:
        return settings_from_environment(ActorConfig(models=LitellmModels(...)))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from runtimes.actor.api import ApiConfig
from runtimes.actor.clock import SystemClock
from runtimes.actor.config import ActorConfig
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.handler import FunctionSettings
from runtimes.aws.resources import AwsResources

__all__ = ["settings_from_environment"]


def settings_from_environment(
    actor: ActorConfig, environ: Mapping[str, str] | None = None
) -> FunctionSettings:
    """``PERDURE_TABLE``, ``PERDURE_BUCKET``, ``PERDURE_API_TOKEN``,
    ``PERDURE_SCHEDULE_GROUP``, ``PERDURE_FUNCTION_ARN``, ``PERDURE_SCHEDULER_ROLE_ARN``
    (all required) and ``PERDURE_WORKDIR`` (default ``/tmp/perdure``, created)."""
    import boto3  # type: ignore[import-untyped]  # the `aws` extra, only where it runs

    env = os.environ if environ is None else environ
    clock = SystemClock()
    workdir = Path(env.get("PERDURE_WORKDIR", "/tmp/perdure"))
    workdir.mkdir(parents=True, exist_ok=True)
    resources = AwsResources(
        dynamodb=boto3.client("dynamodb"),
        s3=boto3.client("s3"),
        table=env["PERDURE_TABLE"],
        bucket=env["PERDURE_BUCKET"],
    )
    alarms = WakeSchedule(
        boto3.client("scheduler"),
        env["PERDURE_SCHEDULE_GROUP"],
        env["PERDURE_FUNCTION_ARN"],
        env["PERDURE_SCHEDULER_ROLE_ARN"],
        clock.now,
    )
    return FunctionSettings(
        resources=resources,
        actor=actor,
        api=ApiConfig(env["PERDURE_API_TOKEN"]),
        workdir=workdir,
        alarms=alarms,
        clock=clock,
    )

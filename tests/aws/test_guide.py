"""infra/aws/README.md as a user follows it: the offline steps CI runs (.ci/guide_steps.py)
are the build and the check, none needing an account; the account steps set secrets
from variables defined first; the settings factory it shows works as written."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import boto3
import pytest

from runtimes.aws import AwsResources
from runtimes.aws.handler import FunctionSettings
from runtimes.models import OpenAICompatibleModels
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "infra" / "aws" / "README.md").read_text()


def _steps() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guide_steps", ROOT / ".ci" / "guide_steps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_the_build_and_the_check_and_nothing_needing_an_account() -> None:
    commands = "".join(_steps().offline_commands(GUIDE))
    assert "sam build -t infra/aws/template.yaml" in commands
    assert "infra/aws/validate.py --self-test" in commands
    for account_only in ("aws ", "sam deploy", "curl "):
        assert account_only not in commands, account_only
    # ...and every shell block of the guide is either run by CI or marked (account).
    every = re.findall(r"^```sh\n", GUIDE, re.MULTILINE)
    marked = [s for s in re.split(r"^(?=## )", GUIDE, flags=re.MULTILINE) if "(account)" in s[:80]]
    account_blocks = sum(len(re.findall(r"^```sh\n", s, re.MULTILINE)) for s in marked)
    assert len(every) == len(_steps().offline_commands(GUIDE)) + account_blocks


def test_secrets_are_set_from_variables_the_guide_defines_first() -> None:
    for name in ("API_TOKEN", "MODEL_KEY", "API_TOKEN_ARN", "MODEL_KEY_ARN"):
        defined = re.search(rf"^{name}=|read -rs {name}\b", GUIDE, re.MULTILINE)
        used = GUIDE.find(f'"${name}"')
        assert defined is not None and 0 <= defined.start() < used, name
    # Nothing outside the repository: no path climbing out of it, no absolute one.
    assert re.search(r"(^|[\s(`])(\.\./|/work/|/root/|/tmp/)", GUIDE) is None


def test_the_guides_settings_factory_works_as_written(
    aws: AwsResources, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (snippet,) = re.findall(r"^```python\n(.*?)^```", GUIDE, re.MULTILINE | re.DOTALL)
    token = boto3.client("secretsmanager").create_secret(
        Name="perdure/api-token", SecretString="guide-token-0123456789"
    )["ARN"]
    module = ModuleType("mysettings")
    exec(compile(snippet, "infra/aws/README.md", "exec"), module.__dict__)
    for name, value in {
        "PERDURE_TABLE": aws.table,
        "PERDURE_BUCKET": aws.bucket,
        "PERDURE_SCHEDULE_GROUP": GROUP,
        "PERDURE_FUNCTION_ARN": FUNCTION_ARN,
        "PERDURE_SCHEDULER_ROLE_ARN": ROLE_ARN,
        "PERDURE_API_TOKEN_ARN": token,
        "PERDURE_WORKDIR": str(tmp_path / "tmp"),
    }.items():
        monkeypatch.setenv(name, value)
    settings = module.settings()
    assert isinstance(settings, FunctionSettings)
    assert isinstance(settings.actor.models, OpenAICompatibleModels)
    assert settings.actor.default_agent == {"model": "my-model"}
    assert "mysettings" not in sys.modules

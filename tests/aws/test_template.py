"""infra/aws/template.yaml lints clean before and after the SAM transform, and the
validation catches a deliberate error of each kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "aws" / "template.yaml"


def _validate() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "validate", ROOT / "infra" / "aws" / "validate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_lints_clean_before_and_after_the_transform() -> None:
    validate = _validate()
    text = TEMPLATE.read_text()
    assert validate.findings(text) == []
    resources = validate.transformed(text)["Resources"]
    types = {r["Type"] for r in resources.values()}
    assert {"AWS::Lambda::Function", "AWS::Lambda::Url", "AWS::DynamoDB::Table"} <= types
    assert {"AWS::S3::Bucket", "AWS::Scheduler::ScheduleGroup", "AWS::IAM::Role"} <= types


def test_a_bad_property_is_caught_by_the_first_lint() -> None:
    text = TEMPLATE.read_text().replace("BillingMode: PAY_PER_REQUEST", "BillingMode: FREE")
    found = _validate().findings(text)
    assert found and all(f.startswith("template:") for f in found), found


def test_a_role_function_cycle_is_caught() -> None:
    # The scheduler role naming the function by reference, while the function's
    # environment names the role: a circular dependency.
    invoke = (
        '                Resource: !Sub "arn:${AWS::Partition}:lambda:${AWS::Region}:'
        '${AWS::AccountId}:function:${AWS::StackName}-actor"\n'
    )
    text = TEMPLATE.read_text()
    assert invoke in text
    found = _validate().findings(
        text.replace(invoke, "                Resource: !GetAtt ActorFunction.Arn\n")
    )
    assert any("E3004" in f for f in found), found

"""infra/aws/template.yaml lints clean, and the lint catches a deliberate error. The
SAM transform and the second lint (which catches a role ↔ function cycle) run in their
own venv in .ci/run (``infra/aws/validate.py --self-test``): the transform pins an older
pydantic than the project's."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from cfnlint.decode import decode_str

from runtimes.aws.config import SETTINGS
from runtimes.aws.keys import LISTING_INDEX, LISTING_KEY, LISTING_SORT

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "aws" / "template.yaml"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "infra" / "aws" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _validate() -> ModuleType:
    return _module("validate")


def test_the_template_lints_clean() -> None:
    assert _validate().findings(TEMPLATE.read_text(), transform=False) == []


def test_a_bad_property_is_caught_by_the_lint() -> None:
    text = TEMPLATE.read_text().replace("BillingMode: PAY_PER_REQUEST", "BillingMode: FREE")
    found = _validate().findings(text, transform=False)
    assert found and all(f.startswith("template:") for f in found), found


def _function(template: dict[str, Any]) -> dict[str, Any]:
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::Function"
    ]
    return function


def test_the_function_gets_exactly_the_settings_it_reads_from_their_parameters() -> None:
    template, problems = decode_str(TEMPLATE.read_text())
    assert template is not None, problems
    variables = _function(template)["Properties"]["Environment"]["Variables"]
    assert set(variables) == {s.variable for s in SETTINGS}
    for setting in SETTINGS:
        if setting.parameter is not None:
            assert variables[setting.variable] == {"Ref": setting.parameter}, setting
            assert setting.parameter in template["Parameters"]


def test_the_build_reads_the_runtime_and_architecture_the_template_declares() -> None:
    template, _ = decode_str(TEMPLATE.read_text())
    assert template is not None
    properties = _function(template)["Properties"]
    version, arch = _module("build").runtime_of(TEMPLATE.read_text())
    assert properties["Runtime"] == f"python{version}"
    assert properties["Architectures"] == [arch]
    assert _function(template)["Metadata"]["BuildMethod"] == "makefile"


def test_the_functions_requirements_are_the_projects_own_specifiers() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {*project["dependencies"], *project["optional-dependencies"]["aws"]}
    lines = (ROOT / "infra" / "aws" / "requirements.txt").read_text().splitlines()
    wanted = [line for line in lines if line and not line.startswith("#")]
    assert wanted and set(wanted) <= declared, set(wanted) - declared


def test_the_table_has_the_listing_index_the_host_queries() -> None:
    """The sparse index ``GET /v1/actors`` reads (runtimes/aws/keys.py), as the template
    declares it, and the function may query it."""
    template, _ = decode_str(TEMPLATE.read_text())
    assert template is not None
    table = template["Resources"]["ActorTable"]["Properties"]
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == LISTING_INDEX
    assert index["KeySchema"] == [
        {"AttributeName": LISTING_KEY, "KeyType": "HASH"},
        {"AttributeName": LISTING_SORT, "KeyType": "RANGE"},
    ]
    assert index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    declared = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    assert declared == {"pk": "S", "sk": "S", LISTING_KEY: "S", LISTING_SORT: "S"}
    statements = _function(template)["Properties"]["Policies"][0]["Statement"]
    (dynamodb,) = [s for s in statements if "dynamodb:Query" in s["Action"]]
    assert {"Fn::Sub": f"${{ActorTable.Arn}}/index/{LISTING_INDEX}"} in dynamodb["Resource"]

"""Validate the SAM template offline: cfn-lint on the template, then the SAM transform
in-process (samtranslator) and cfn-lint again on its output — the second lint catches
what only appears after the transform (a circular dependency, say).

``python infra/aws/validate.py [template.yaml]``: prints the findings, exits 1 on any.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import boto3
from cfnlint.api import lint
from cfnlint.decode import decode_str
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

__all__ = ["findings", "transformed"]

TEMPLATE = Path(__file__).with_name("template.yaml")


REGION = "us-east-1"  # the transform fills AWS::Region / AWS::Partition from a session


def _no_managed_policies() -> dict[str, str]:
    # Asked for only when a template names an AWS managed policy; this one names none,
    # so nothing is looked up (and nothing goes online).
    return {}


def transformed(text: str) -> dict[str, Any]:
    """The template after the SAM transform (code locations replaced by a placeholder:
    the transform wants ``s3://`` URIs, which only ``sam package`` produces)."""
    template, problems = decode_str(text)
    if template is None:
        raise ValueError(f"unreadable template: {problems}")
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://placeholder-bucket/perdure.zip"
    plain = json.loads(json.dumps(template))  # the decoder's node types → plain values
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=REGION))
    result: dict[str, Any] = translator.translate(
        plain, parameter_values={}, get_managed_policy_map=_no_managed_policies
    )
    return result


def findings(text: str) -> list[str]:
    """cfn-lint's findings on the template and on its transformed output."""
    found = [f"template: {m}" for m in lint(text)]
    if not found:
        found += [f"transformed: {m}" for m in lint(json.dumps(transformed(text)))]
    return found


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else TEMPLATE
    problems = findings(path.read_text())
    for problem in problems:
        print(problem)
    print(f"{path}: {'ok' if not problems else f'{len(problems)} finding(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

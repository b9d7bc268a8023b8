"""The wire contract: error codes map 1:1 to core errors; the protocol module stays pure."""

from __future__ import annotations

import ast
import re

import pytest
from pydantic import ValidationError

from core.env import EnvError, error_class_for_code, error_from_code
from remote_env.protocol import BashArgs, ReadArgs, fingerprint
from tests.remote_env.support import REPO

# Codes that describe the HTTP exchange rather than the operation; the client handles them
# by status (401/404/413/5xx) before looking at the code.
_TRANSPORT_CODES = {"op_not_found", "internal", "no_route", "method_not_allowed", "http_error"}


def _server_codes() -> set[str]:
    codes: set[str] = set()
    for path in (REPO / "remote_env" / "server").glob("*.py"):
        source = path.read_text()
        codes |= set(re.findall(r'ToolFailure\(\s*"([a-z_]+)"', source))
        codes |= set(re.findall(r'Rejected\(\s*\d+,\s*"([a-z_]+)"', source))
        codes |= set(re.findall(r'ErrorBody\(\s*code="([a-z_]+)"', source))
        codes |= set(re.findall(r'"code": "([a-z_]+)"', source))
    return codes


def test_every_operation_error_code_has_a_core_error() -> None:
    codes = _server_codes()
    assert {"not_found", "edit_not_unique", "timeout", "outside_workspace", "lost"} <= codes
    for code in sorted(codes - _TRANSPORT_CODES):
        assert error_class_for_code(code) is not EnvError, code
        assert error_from_code(code, "m").code == code


def test_unknown_codes_stay_visible() -> None:
    error = error_from_code("brand_new", "m")
    assert type(error) is EnvError
    assert error.code == "brand_new"


def test_fingerprint_ignores_transport_fields_and_key_order() -> None:
    a = fingerprint("bash", BashArgs(command="ls", env={"A": "1", "B": "2"}))
    b = fingerprint("bash", BashArgs(env={"B": "2", "A": "1"}, command="ls"))
    assert a == b
    assert a != fingerprint("bash", BashArgs(command="ls -a"))
    assert fingerprint("read", ReadArgs(path="x")) == fingerprint(
        "read", ReadArgs(path="x", offset=1)
    )


@pytest.mark.parametrize("bad", [{"command": "a\x00b"}, {"command": "x", "env": {"1A": "x"}}])
def test_bash_args_validation(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BashArgs.model_validate(bad)


def test_protocol_module_imports_no_server_or_client_code() -> None:
    tree = ast.parse((REPO / "remote_env" / "protocol.py").read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {
        name for name in imported if name.split(".")[0] in {"fastapi", "starlette", "httpx"}
    }
    assert not {
        name for name in imported if name.startswith(("remote_env.server", "remote_env.client"))
    }


def test_client_and_server_do_not_import_each_other() -> None:
    for side, other in (("client", "server"), ("server", "client")):
        for path in (REPO / "remote_env" / side).glob("*.py"):
            assert f"remote_env.{other}" not in path.read_text(), path

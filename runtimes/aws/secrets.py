"""Reading the function's secrets (the API token, the model key, the sandbox secret) from
Secrets Manager or SSM Parameter Store, by the ARNs :mod:`runtimes.aws.config` read.

Read once per cold start (the settings factory runs once per container), so a rotated
secret reaches a container when it next starts. A secret that cannot be had for a reason
the operator must fix — not found, access denied, not decryptable, empty, binary — is a
:class:`~runtimes.aws.config.Misconfigured` naming its template parameter; the message
carries the service's error code, never a value. Anything else (the network, a throttle)
propagates: the invocation fails and the next one tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtimes.aws.config import Misconfigured, SecretRef
from runtimes.aws.resources import error_code

__all__ = ["SecretReader"]

# The codes a retry will not cure; other ClientErrors (throttles, 5xx) propagate.
_OPERATOR_ERRORS = frozenset(
    {
        "AccessDeniedException",
        "AccessDenied",
        "DecryptionFailure",
        "InvalidParameterException",
        "InvalidRequestException",
        "InvalidKeyId",
        "ParameterNotFound",
        "ParameterVersionNotFound",
        "ResourceNotFoundException",
        "ValidationException",
        "KMSAccessDeniedException",
    }
)


@contextmanager
def _response_bodies_unlogged() -> Iterator[None]:
    """botocore logs every response body at DEBUG (a function's log level may be set to
    DEBUG): not while a secret's value is in one."""
    parsers = logging.getLogger("botocore.parsers")
    level = parsers.level
    parsers.setLevel(max(level, logging.INFO))
    try:
        yield
    finally:
        parsers.setLevel(level)


class SecretReader:
    """Reads :class:`SecretRef` values with boto3 clients made on first use (a function
    whose secrets all live in one service never makes the other client)."""

    def __init__(self, clients: dict[str, Any] | None = None) -> None:
        self._clients: dict[str, Any] = dict(clients or {})

    def read(self, ref: SecretRef) -> str:
        """The secret's text, stripped of surrounding whitespace."""
        try:
            with _response_bodies_unlogged():
                value = self._fetch(ref)
        except Exception as error:
            code = error_code(error)
            if code not in _OPERATOR_ERRORS:
                raise
            raise Misconfigured(
                [f"{ref.setting.describe()}: the secret cannot be read ({code})"]
            ) from None
        text = value.strip() if isinstance(value, str) else ""
        if not text:
            raise Misconfigured([f"{ref.setting.describe()}: the secret holds no text"])
        return text

    def _fetch(self, ref: SecretRef) -> Any:
        if ref.service == "ssm":
            out = self._client("ssm").get_parameter(Name=ref.arn, WithDecryption=True)
            return out["Parameter"].get("Value")
        return self._client("secretsmanager").get_secret_value(SecretId=ref.arn).get("SecretString")

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            import boto3  # type: ignore[import-untyped]  # the `aws` extra

            self._clients[service] = boto3.client(service)
        return self._clients[service]

"""The AWS host's fixtures (a moto server, fake credentials) for its crash tests here.

They are defined once, in ``tests/aws/conftest.py``; importing them makes pytest offer
them in this folder too (the autouse credentials apply here as they do there).
"""

from tests.aws.conftest import _credentials, aws_http, moto_server

__all__ = ["_credentials", "aws_http", "moto_server"]

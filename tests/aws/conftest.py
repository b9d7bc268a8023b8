"""moto-backed AWS resources for the AWS host's tests.

``aws`` is in-process (``mock_aws``); ``aws_http`` is a ``ThreadedMotoServer`` on
127.0.0.1 reached over real HTTP with ``endpoint_url``, as a deployed client would.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from runtimes.aws import AwsResources
from runtimes.aws.keys import LISTING_INDEX, LISTING_KEY, LISTING_SORT

REGION = "us-east-1"
TABLE = "perdure-actors"
BUCKET = "perdure-actor-state"


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fake credentials, so botocore never looks for real ones.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)


def create_resources(endpoint_url: str | None = None) -> AwsResources:
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint_url)
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=endpoint_url)
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": "S"}
            for name in ("pk", "sk", LISTING_KEY, LISTING_SORT)
        ],
        # As infra/aws/template.yaml declares it (tests/aws/test_template.py checks).
        GlobalSecondaryIndexes=[
            {
                "IndexName": LISTING_INDEX,
                "KeySchema": [
                    {"AttributeName": LISTING_KEY, "KeyType": "HASH"},
                    {"AttributeName": LISTING_SORT, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    s3.create_bucket(Bucket=BUCKET)
    return AwsResources(dynamodb=dynamodb, s3=s3, table=TABLE, bucket=BUCKET)


@pytest.fixture
def aws() -> Iterator[AwsResources]:
    with mock_aws():
        yield create_resources()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws_http(moto_server: str) -> Iterator[AwsResources]:
    import urllib.request

    resources = create_resources(moto_server)
    try:
        yield resources
    finally:
        # Every test starts from empty DynamoDB and S3.
        urllib.request.urlopen(
            urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")
        ).close()

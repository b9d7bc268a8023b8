"""The built Lambda artifact, run as deployed (``artifact`` mark: ``.ci/run`` builds the
artifact with ``sam build``, zips it and points ``PERDURE_AWS_ARTIFACT`` at the zip;
without it, this module builds one with ``infra/aws/build.py``).

The zip is unpacked into an empty directory and served by the template's ``Runtime``
interpreter (``python3.X``) started with ``-I -S`` and that directory alone on its path
(``tests/aws/lambda_runtime.py``: no site-packages, nothing of this checkout), with the
template's environment variables, against a moto server over HTTP (DynamoDB, S3, the
Scheduler, Secrets Manager, SSM) and a local OpenAI-compatible model server: a Function
URL submission answered in a later invocation, a reminder woken by the Scheduler's own
event, a stale lease holder fenced off, a half configuration refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.decode import decode_str

from runtimes.actor.clock import SystemClock
from runtimes.aws import AwsResources
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN, create_alarms
from tests.aws.conftest import REGION
from tests.aws.lambda_support import answer, url_event
from tests.aws.support import head
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage

pytestmark = pytest.mark.artifact

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "aws" / "template.yaml"
RUNTIME = Path(__file__).with_name("lambda_runtime.py")
TOKEN = "artifact-api-token-0123456789"
MODEL_KEY = "artifact-model-key-9876543210"
_SUB = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": "123456789012"}


def _function() -> dict[str, Any]:
    template, problems = decode_str(TEMPLATE.read_text())
    assert template is not None, problems
    (function,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::Function"
    ]
    return {"template": template, **function["Properties"]}


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The artifact unpacked into an empty directory, as Lambda unpacks it."""
    archive = os.environ.get("PERDURE_AWS_ARTIFACT")
    if not archive:
        out = tmp_path_factory.mktemp("build")
        build = [sys.executable, str(ROOT / "infra" / "aws" / "build.py"), str(out / "code")]
        subprocess.run([*build, "--zip", str(out / "function.zip")], check=True)
        archive = str(out / "function.zip")
    target = tmp_path_factory.mktemp("task")
    assert not any(target.iterdir())
    with zipfile.ZipFile(archive) as unpacked:
        unpacked.extractall(target)
    assert not (target / "tests").exists()
    return target


@pytest.fixture(scope="module")
def runtime_python() -> str:
    """The interpreter of the template's ``Runtime`` (``python3.13`` → a Python 3.13),
    found as the build finds the one it compiles bytecode with."""
    version = _function()["Runtime"].removeprefix("python")
    spec = importlib.util.spec_from_file_location("build", ROOT / "infra" / "aws" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    found: str | None = build.runtime_python(version)
    if found is None:
        pytest.fail(f"the template's runtime python{version} is not installed on this machine")
    return found


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def deployment(aws_http: AwsResources, moto_server: str, model: FakeOpenAI) -> dict[str, str]:
    """The stack's resources and secrets in moto: the template's parameter values."""
    create_alarms(SystemClock().now, moto_server)
    manager = boto3.client("secretsmanager", region_name=REGION, endpoint_url=moto_server)
    ssm = boto3.client("ssm", region_name=REGION, endpoint_url=moto_server)
    token = manager.create_secret(Name="perdure/api-token", SecretString=TOKEN)["ARN"]
    ssm.put_parameter(Name="/perdure/model-key", Value=MODEL_KEY, Type="SecureString")
    key = ssm.get_parameter(Name="/perdure/model-key")["Parameter"]["ARN"]
    return {
        "ApiTokenArn": token,
        "Model": "artifact-model",
        "ModelBaseUrl": model.base_url,
        "ModelKeyArn": key,
        # the resources the variables name
        "ActorTable": aws_http.table,
        "StateBucket": aws_http.bucket,
        "WakeGroup": GROUP,
        "SchedulerRole.Arn": ROLE_ARN,
    }


def _resolve(value: Any, values: dict[str, str]) -> str:
    """A variable's template value with the stack's parameter values and resources."""
    if isinstance(value, dict):
        ((kind, arg),) = value.items()
        if kind == "Ref":
            return values.get(arg, "")
        if kind == "Fn::GetAtt":
            return values[".".join(arg) if isinstance(arg, list) else arg]
        if kind == "Fn::Sub":
            names = {**_SUB, "AWS::StackName": "perdure"}
            return re.sub(r"\$\{([^}]+)\}", lambda m: names[m.group(1)], arg)
    return str(value)


class Container:
    """One Lambda container: the runtime stand-in serving the unpacked artifact."""

    def __init__(
        self, python: str, code: Path, moto: str, values: dict[str, str], tmp: Path
    ) -> None:
        function = _function()
        defaults = {
            name: str(p["Default"])
            for name, p in function["template"]["Parameters"].items()
            if "Default" in p
        }
        variables = {
            name: _resolve(value, {**defaults, **values})
            for name, value in function["Environment"]["Variables"].items()
        }
        assert variables["PERDURE_FUNCTION_ARN"] == FUNCTION_ARN
        self.tmp = tmp
        tmp.mkdir()
        (tmp / "home").mkdir()
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp / "home"),  # no ~/.aws of this machine
            "LAMBDA_TASK_ROOT": str(code),
            "AWS_LAMBDA_FUNCTION_NAME": "perdure-actor",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_ENDPOINT_URL": moto,  # every client of the artifact goes to moto
            "PERDURE_WORKDIR": str(tmp / "tmp"),  # the container's own /tmp
            **variables,
        }
        self.stderr = (tmp / "stderr").open("w")
        self.proc = subprocess.Popen(
            [python, "-I", "-S", str(RUNTIME), str(code), function["Handler"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            cwd=code,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._requests = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def send(self, event: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self._requests += 1
        call = {"event": event, "request_id": f"{self.tmp.name}-{self._requests}"}
        self.proc.stdin.write(json.dumps(call) + "\n")
        self.proc.stdin.flush()

    def result(self, timeout: float = 60) -> Any:
        try:
            out = json.loads(self._lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer in {timeout} s: {self.log()}") from None
        assert "response" in out, f"{out}: {self.log()}"
        return out["response"]

    def invoke(self, event: dict[str, Any]) -> Any:
        self.send(event)
        return self.result()

    def log(self) -> str:
        if not self.stderr.closed:
            self.stderr.flush()
        return (self.tmp / "stderr").read_text()

    def close(self) -> list[str]:
        """End the container; the modules it loaded from outside the artifact."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        outside: list[str] = json.loads(self._lines.get(timeout=5))["outside"]
        self.release()
        return outside

    def release(self) -> None:
        """Close this side's pipes and files (the process has ended)."""
        self._reader.join(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()


@pytest.fixture
def containers(
    runtime_python: str, code_dir: Path, moto_server: str, tmp_path: Path
) -> Iterator[Any]:
    started: list[Container] = []

    def start(values: dict[str, str]) -> Container:
        tmp = tmp_path / f"container-{len(started)}"
        started.append(Container(runtime_python, code_dir, moto_server, values, tmp))
        return started[-1]

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()
        c.release()


def _reply(words: str, *, stall: float = 0.0) -> Stream:
    return Stream([text(words), finish("stop"), usage(7, 3)], stall=stall)


def _url(method: str, path: str, body: Any = None, query: str = "") -> dict[str, Any]:
    return url_event(method, path, body, query=query, token=TOKEN)


def test_a_submission_is_answered_and_read_in_a_later_invocation(
    containers: Any, deployment: dict[str, str], model: FakeOpenAI
) -> None:
    model.script(_reply("hello from the model"))
    container = containers(deployment)
    body = {"type": "input", "content": "hi", "request_id": "job-1"}
    status, accepted = answer(container.invoke(_url("POST", "/v1/actors/s1/submissions", body)))
    assert status == 202, accepted
    status, state = answer(
        container.invoke(_url("GET", f"/v1/actors/s1/submissions/{accepted['id']}"))
    )
    assert status == 200 and state["status"] == "done", state
    assert state["answer"]["text"] == "hello from the model"
    (request,) = model.received
    assert request.headers["authorization"] == f"Bearer {MODEL_KEY}"
    assert request.body["model"] == "artifact-model"
    status, refused = answer(
        container.invoke(url_event("GET", "/v1/actors/s1/timers", token="wrong-token-0123456789"))
    )
    assert status == 401, refused
    assert container.close() == []  # nothing came from outside the artifact
    assert TOKEN not in container.log() and MODEL_KEY not in container.log()


def test_a_scheduler_event_wakes_a_reminder(
    containers: Any, deployment: dict[str, str], model: FakeOpenAI, moto_server: str
) -> None:
    model.script(_reply("hello"), _reply("reminded you"))
    container = containers(deployment)
    body = {"type": "input", "content": "hi"}
    status, accepted = answer(container.invoke(_url("POST", "/v1/actors/r1/submissions", body)))
    assert status == 202, accepted
    path = "/v1/actors/r1/conversations/1/reminders"
    status, reminder = answer(
        container.invoke(_url("POST", path, {"message": "stretch", "after": 1}))
    )
    assert status == 201, reminder
    assert len(model.received) == 1  # the reminder waits: a durable deadline
    # The park armed the actor's one-time schedule; its input is what the Scheduler sends.
    scheduler = boto3.client("scheduler", region_name=REGION, endpoint_url=moto_server)
    (listed,) = scheduler.list_schedules(GroupName=GROUP)["Schedules"]
    schedule = scheduler.get_schedule(GroupName=GROUP, Name=listed["Name"])
    assert schedule["Target"]["Arn"] == FUNCTION_ARN
    wake = json.loads(schedule["Target"]["Input"])
    assert wake["perdure"] == "wake" and wake["actor"] == "r1"
    # Delivered before the deadline, as the Scheduler's minute precision may: the wake
    # lets what is due within the minute run.
    assert wake["at"] > time.time() * 1000
    woken = containers(deployment)  # delivered to another (cold) container
    assert woken.invoke(wake) == {"status": "woken", "actor": "r1"}
    # The wake submitted the reminder's message; a later invocation reads its answer.
    listing = "/v1/actors/r1/conversations/1/submissions"
    status, page = answer(woken.invoke(_url("GET", listing, query="order=desc&limit=5")))
    assert status == 200, page
    (fired,) = [s for s in page["submissions"] if (s["request_id"] or "").startswith("reminder:")]
    assert fired["status"] in ("placed", "done"), fired
    status, state = answer(
        container.invoke(_url("GET", f"/v1/actors/r1/submissions/{fired['id']}", query="wait=20"))
    )
    assert status == 200 and state["status"] == "done", state
    assert state["answer"]["text"] == "reminded you"
    status, entries = answer(container.invoke(_url("GET", "/v1/actors/r1/conversations/1/view")))
    users = [e["message"]["content"] for e in entries["entries"] if e["kind"] == "user"]
    assert users == ["hi", "stretch"], users
    assert woken.close() == [] and container.close() == []


def test_a_stale_lease_holder_is_refused(
    containers: Any, deployment: dict[str, str], model: FakeOpenAI, aws_http: AwsResources
) -> None:
    # The first container's model answer comes late; the second container's at once.
    model.script(_reply("stale answer", stall=5.0), _reply("fresh answer"))
    stale, fresh = containers(deployment), containers(deployment)
    body = {"type": "input", "content": "book it", "request_id": "job-7"}
    submit = _url("POST", "/v1/actors/f1/submissions", body)
    stale.send(submit)
    deadline = time.monotonic() + 30
    while not model.received and time.monotonic() < deadline:
        time.sleep(0.01)
    assert model.received, stale.log()
    # Paused mid-request (a frozen container, a GC pause) past its lease: the lease is
    # made to run out now instead of in 16 minutes.
    stale.proc.send_signal(signal.SIGSTOP)
    epoch = int(head(aws_http, "f1")["epoch"])
    aws_http.dynamodb.update_item(
        TableName=aws_http.table,
        Key={"pk": {"S": "actor#f1"}, "sk": {"S": "head"}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": "0"}},
    )
    status, taken = answer(fresh.invoke(submit))  # the same request: the same submission
    assert status == 202, taken
    after_takeover = head(aws_http, "f1")
    assert int(after_takeover["epoch"]) > epoch and "owner" not in after_takeover
    stale.proc.send_signal(signal.SIGCONT)
    status, late = answer(stale.result())
    # Its admission was still pending in its group of commits (the handler answers when
    # the invocation ends): the flush is fenced off, so it answers 503 and asks for the
    # request again; nothing of it landed.
    assert status == 503 and late["error"]["code"] == "storage_failed", late
    assert "fenced off" in stale.log(), stale.log()
    assert head(aws_http, "f1") == after_takeover
    status, again = answer(fresh.invoke(submit))  # sent again: accepted once
    assert status == 202 and again["id"] == taken["id"], again
    status, state = answer(fresh.invoke(_url("GET", f"/v1/actors/f1/submissions/{taken['id']}")))
    assert state["status"] == "done" and state["answer"]["text"] == "fresh answer", state
    status, page = answer(fresh.invoke(_url("GET", "/v1/actors/f1/conversations/1/entries")))
    assert "stale answer" not in json.dumps(page)
    assert stale.close() == [] and fresh.close() == []


def test_a_half_configured_sandbox_is_refused_at_the_cold_start(
    containers: Any, deployment: dict[str, str], aws_http: AwsResources
) -> None:
    container = containers({**deployment, "SandboxUrl": "https://sandbox.example"})
    status, out = answer(container.invoke(_url("GET", "/v1/actors/h1/timers")))
    assert status == 503 and out["error"]["code"] == "misconfigured", out
    assert "SandboxSecretArn" in out["error"]["message"]
    wake = container.invoke({"perdure": "wake", "actor": "h1", "at": 0})
    assert wake["status"] == 503, wake
    assert aws_http.dynamodb.scan(TableName=aws_http.table)["Items"] == []
    assert container.close() == []
    (line,) = [x for x in container.log().splitlines() if "misconfigured" in x]
    assert "template parameter SandboxSecretArn" in line

"""The AWS host's storage layer: a fenced DynamoDB lease per actor and the actor's SQLite
working copy made durable by a fenced commit log (DynamoDB) plus snapshots (S3).

* :mod:`runtimes.aws.lease` — acquire / renew / release of the head item, bumping the
  fencing ``epoch`` on every grant;
* :mod:`runtimes.aws.log` — a commit's write set, or a group's, as DynamoDB log items
  (or an S3 object);
* :mod:`runtimes.aws.gate` — the :class:`~core.storage.sqlite.CommitGate` that makes
  commits durable with fenced ``TransactWriteItems``: one per commit, or (deferring,
  under the handler) one per group;
* :mod:`runtimes.aws.snapshots` — SQLite file snapshots to S3 and log garbage collection;
* :mod:`runtimes.aws.replica` — opening an actor: lease, then a warm, caught-up or rebuilt
  working copy served by the portable ``SqliteStorage``;
* :mod:`runtimes.aws.host` — the shared ``ActorPool`` over those replicas, one lease
  owner per invocation, the schedule armed before the lease is released;
* :mod:`runtimes.aws.alarms` — one EventBridge Scheduler one-time schedule per actor;
* :mod:`runtimes.aws.mailbox` — submissions that arrived while another invocation held
  the actor;
* :mod:`runtimes.aws.handler` — the Lambda entry point: the actor API behind Mangum,
  scheduler wakes, direct invokes, ``503 misconfigured`` for a refused configuration;
* :mod:`runtimes.aws.config` — the variables the template sets, checked by parameter
  name; :mod:`runtimes.aws.secrets` — the secrets they point at (Secrets Manager, SSM);
  :mod:`runtimes.aws.environment` — the function's settings from both, with the default
  agent of :mod:`runtimes.aws.agent` (an OpenAI-compatible model, the sandbox's tools).

boto3 is the ``aws`` extra; clients are injected (:class:`AwsResources`), so tests point
them at moto.
"""

from runtimes.aws.errors import LeaseHeld, LeaseLost
from runtimes.aws.gate import DynamoCommitGate
from runtimes.aws.lease import Lease, LeaseGrant
from runtimes.aws.replica import ActorReplica, open_actor_replica
from runtimes.aws.resources import AwsResources

__all__ = [
    "ActorReplica",
    "AwsResources",
    "DynamoCommitGate",
    "Lease",
    "LeaseGrant",
    "LeaseHeld",
    "LeaseLost",
    "open_actor_replica",
]

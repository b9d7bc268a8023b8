"""The generation task and its jobs, one module each.

* :mod:`~core.harness.generation.task`: the task definition (its phases and checkpoints);
* :mod:`~core.harness.generation.prepare`: ``prepare``, and the plan and pin the
  hand-over reuses;
* :mod:`~core.harness.generation.request`: ``request`` and ``poll`` — the model request,
  its stream and the response's classification (``retry``, one commit, stays in
  ``task``);
* :mod:`~core.harness.generation.hand_over`: ``tools``, and the merged hand-over a tool's
  result commit carries;
* :mod:`~core.harness.generation.end`: failures, aborts, scheduler-written outcomes;
* :mod:`~core.harness.generation.live`: the state reads the generation and tool tasks
  share.

Names with a leading underscore are this package's own, shared between its modules;
each module's ``__all__`` lists what the rest of the harness uses. This file imports
nothing: ``runs`` reads :mod:`~core.harness.generation.live` while ``task`` imports
``runs``, so a package that loaded its modules here would be a cycle.
"""

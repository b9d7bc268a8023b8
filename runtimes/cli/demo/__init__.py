"""``perdure demo``: the travel-agent crash-and-recovery demo (see :mod:`.scenario`)."""

from runtimes.cli.demo.scenario import scenario_model, travel_tools

__all__ = ["scenario_model", "travel_tools"]

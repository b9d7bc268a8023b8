"""The ``perdure`` command and its applications: clients (``chat``, ``inspect``) and
launchers (``dev``, ``demo``, ``counter``) of the hosts. No host logic lives here."""

__all__: list[str] = []

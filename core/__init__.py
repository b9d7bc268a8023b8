"""perdure core: runtime-agnostic, no OS calls."""

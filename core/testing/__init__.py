"""Test kits shipped with perdure (no pytest dependency)."""

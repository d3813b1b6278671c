"""rl-workbench."""

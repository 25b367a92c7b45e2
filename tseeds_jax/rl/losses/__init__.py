"""rl/losses."""

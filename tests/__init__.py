"""The test suite (a regular package: see tests/test_suite_start.py)."""

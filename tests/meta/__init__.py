"""The suite's own checks: the layout rules, the test infrastructure, the ledger matrix."""

"""Whole-daemon properties: crash, power loss, chaos, hostile input, full disk, FIFOs."""

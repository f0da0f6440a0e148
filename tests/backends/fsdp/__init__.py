"""Tests of backends/fsdp/: the FSDP2 strategy, its plugin and its launch settings."""

"""Tests of backends/deepspeed/: ZeRO on CPU processes, its plugin, config and launch settings."""

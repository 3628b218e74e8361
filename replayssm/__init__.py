"""replayssm: exact, memory-lean speculative decoding for Gated DeltaNet hybrid models."""

__version__ = "0.1.0"

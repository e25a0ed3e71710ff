"""A deterministic simulator of checkpointing protocols over the pure core."""

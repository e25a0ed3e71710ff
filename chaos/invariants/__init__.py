"""The checker's invariants, one module each, all pure functions of Facts (a history, indexed)."""

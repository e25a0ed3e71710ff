"""An explicit-state model checker of the recovery protocol over the real pure core.

Breadth-first over every interleaving of agents' sends, receives, checkpoints,
crashes and restarts, message loss, lease expiries, rollback orders and their
acknowledgements, and one change of leader, within bounds; each state is hashed by
a canonical encoding of the replicated store and of the model around it, or, reduced
by symmetry (symmetry.py), by the smallest such encoding over every renaming of the
agents; and a world that only has less budget left (failures, losses, leader changes,
epochs) than one already queued is not explored (subsumption.py).
"""

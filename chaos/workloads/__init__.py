"""Client workloads that drive a cluster and record what they observe in a History."""

"""agent_client: the library each agent links to checkpoint, message and recover with raftpoint.

Submodules are imported where used (`from agent_client.agent import AgentClient`), so
importing the package loads neither gRPC nor, ever, pysyncobj or LMDB.
"""

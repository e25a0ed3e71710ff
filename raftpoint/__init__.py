"""raftpoint: the applications on top of the coordinator, the agent client and the chaos suite.

The `raftpoint` console command, the demo and the CLI's cluster tools live here and
nowhere below; nothing in coordinator/, agent_client/ or chaos/ imports this package.
"""

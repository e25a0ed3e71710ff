"""The test suite: a package, so tests/agent_client and the like never shadow the packages they test."""

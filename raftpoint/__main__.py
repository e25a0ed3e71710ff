"""`python -m raftpoint ...`: the same as the `raftpoint` console command."""
import sys

from raftpoint.cli.main import main

sys.exit(main())

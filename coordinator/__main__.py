"""`python -m coordinator <flags>`: run one node (see coordinator.main)."""
import sys

from coordinator.main import main

sys.exit(main())

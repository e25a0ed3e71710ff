"""The README's sections and the commands and code in them, for tests that run them as written."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
CONNECT_AN_AGENT = "Connect an agent to a `raftpoint cluster up` cluster"
# The data dir the README's commands and code name.
README_DATA_DIR = "raftpoint-data"


def readme_section(title: str) -> str:
    """The text under the `### title` heading, up to the next heading of that level or above."""
    return README.read_text().split(f"### {title}", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


def fenced(section: str, language: str) -> str:
    """The first ```language block of `section`."""
    found = re.search(rf"```{language}\n(.+?)\n```", section, re.S)
    assert found is not None, f"no {language} block in {section[:200]!r}..."
    return found.group(1)


def shell_commands(section: str) -> list[list[str]]:
    """Each command of the first ```bash block, split as the shell would, comments dropped."""
    lines = (line.split("#", 1)[0] for line in fenced(section, "bash").splitlines())
    return [shlex.split(line) for line in lines if line.strip()]

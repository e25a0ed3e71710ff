"""`raftpoint completion bash|zsh|tcsh`: the shell's completion script for every subcommand
and flag, generated from the same argparse parser the console runs (shtab), so it
cannot fall behind the commands."""
from __future__ import annotations

import argparse

import shtab

SHELLS = ("bash", "zsh", "tcsh")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("completion", help="print the shell completion script",
                            description="Print the completion script for SHELL, e.g. "
                                        "`raftpoint completion bash > /etc/bash_completion.d/raftpoint` or "
                                        "`eval \"$(raftpoint completion bash)\"`.")
    parser.add_argument("shell", choices=SHELLS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(shtab.complete(args.parser, shell=args.shell))  # the whole console's parser (main)
    return 0

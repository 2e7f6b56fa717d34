"""Run by the desk's own Python: the desk's canonical bytes (agents.canonical) of each value.
Reads a JSON list of Python literals (repr) on stdin, writes a JSON list of hex strings, or
"refused:<ExceptionName>" where the desk refuses the value."""

from __future__ import annotations

import ast
import json
import sys

from agents.canonical import canonical_json


def main() -> None:
    out = []
    for literal in json.load(sys.stdin):
        try:
            out.append(canonical_json(ast.literal_eval(literal)).hex())
        except Exception as error:  # what the desk refuses, named
            out.append(f"refused:{type(error).__name__}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

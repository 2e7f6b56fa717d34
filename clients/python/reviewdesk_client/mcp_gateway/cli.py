"""`python -m reviewdesk_client.mcp_gateway`: the command line (docs/clients/mcp-gateway.md)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio

from reviewdesk_client.mcp_gateway.pins import PinFile, PinsError
from reviewdesk_client.mcp_gateway.proxy import Gateway, open_upstream, serve, upstream_parameters

logger = logging.getLogger("reviewdesk_client.mcp_gateway")

# The gateway's name is the desk's external id (`mcp:NAME`) and a directory name.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,100}")
DEFAULT_WAIT_SECONDS = 300.0

USAGE = """\
python -m reviewdesk_client.mcp_gateway --desk URL --name NAME [--gate PATTERN]... [--wait SECONDS]
        [--pins PATH] [--store PATH] [--env NAME[=VALUE]]... -- COMMAND [ARGS...]
python -m reviewdesk_client.mcp_gateway --name NAME [--pins PATH] (--check | --accept [--yes] [--tool NAME]...)
        [--env NAME[=VALUE]]... -- COMMAND [ARGS...]"""


@dataclass(frozen=True)
class Options:
    desk: str | None
    name: str
    gates: tuple[str, ...]
    wait_seconds: float
    pins: Path
    store: Path
    env: dict[str, str]
    command: tuple[str, ...]
    accept: bool
    check: bool
    yes: bool
    tools: tuple[str, ...]


def state_dir(name: str) -> Path:
    """Where a gateway keeps its pins and store unless told otherwise."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "reviewdesk" / "mcp-gateway" / name


def parse(argv: Sequence[str]) -> Options:
    argv = list(argv)
    if "--" not in argv:
        raise SystemExit(f"usage:\n{USAGE}\n(the upstream server's command comes after --)")
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(prog="python -m reviewdesk_client.mcp_gateway", usage=USAGE)
    parser.add_argument("--desk", help="the desk's base URL, e.g. https://desk.example.com")
    parser.add_argument(
        "--name", required=True, help="this gateway's name: the desk shows it, pins are kept under it"
    )
    parser.add_argument(
        "--gate",
        action="append",
        default=[],
        metavar="PATTERN",
        help="fnmatch pattern of tools the desk decides (default: all)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long a gated call waits for a decision (default 300)",
    )
    parser.add_argument(
        "--pins",
        type=Path,
        help="the pins file (default: $XDG_STATE_HOME/reviewdesk/mcp-gateway/NAME/pins.json)",
    )
    parser.add_argument(
        "--store", type=Path, help="the client store, SQLite (default: beside the pins, store.sqlite3)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="an environment variable for the upstream (NAME alone: the gateway's own value)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="list the upstream's tools against the pins, then exit (1 if any differ)",
    )
    parser.add_argument(
        "--accept", action="store_true", help="show each changed definition and accept it as the new pin"
    )
    parser.add_argument("--yes", action="store_true", help="with --accept: do not ask")
    parser.add_argument(
        "--tool", action="append", default=[], metavar="NAME", help="with --accept: only these tools"
    )
    args = parser.parse_args(own)
    if not command:
        parser.error("the upstream server's command is missing after --")
    if not NAME_PATTERN.fullmatch(args.name):
        parser.error("--name must match [A-Za-z0-9_.-]{1,100}")
    if not (args.accept or args.check) and not args.desk:
        parser.error("--desk is required to serve")
    if args.wait < 0:
        parser.error("--wait must be 0 or more seconds")
    home = state_dir(args.name)
    pins = args.pins or home / "pins.json"
    return Options(
        desk=args.desk,
        name=args.name,
        gates=tuple(args.gate),
        wait_seconds=args.wait,
        pins=pins,
        store=args.store or pins.parent / "store.sqlite3",
        env=_environment(parser, args.env),
        command=tuple(command),
        accept=args.accept,
        check=args.check,
        yes=args.yes,
        tools=tuple(args.tool),
    )


def _environment(parser: argparse.ArgumentParser, items: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in os.environ:
                parser.error(f"--env {name}: the variable is not set")
            value = os.environ[name]
        env[name] = value
    return env


async def run(options: Options) -> int:
    pins = PinFile(options.pins, options.name)
    async with AsyncExitStack() as stack:
        upstream = await open_upstream(stack, upstream_parameters(options.command, options.env))
        if options.check or options.accept:
            from reviewdesk_client.mcp_gateway.proxy import Ungated

            served = await Gateway(upstream, pins, options.gates, Ungated()).served()
            return review_pins(pins, served, options)
        from reviewdesk_client.mcp_gateway.desk import DeskGate

        gate = DeskGate.open(options)
        stack.callback(gate.close)
        gateway = Gateway(upstream, pins, options.gates, gate)
        await gateway.reconcile()  # pin on first sight now, not at the first listing
        instructions = upstream.initialize_result.instructions if upstream.initialize_result else None
        await serve(options.name, gateway, instructions)
    return 0


def review_pins(pins: PinFile, served: list[dict[str, object]], options: Options) -> int:
    """`--check` and `--accept`: show what differs from the pins; accept it when asked to."""
    reconciled = pins.differences(served)
    for name, state in sorted(reconciled.states.items()):
        print(f"{name}: {state}")
    changes = [c for c in reconciled.changes if not options.tools or c.name in options.tools]
    if not changes:
        print("every served tool is as pinned")
        return 0
    for change in changes:
        print(change.describe())
    if options.check:
        return 1
    if not options.yes and not _confirm(f"accept {len(changes)} change(s) for {options.name}? [y/N] "):
        print("nothing accepted")
        return 1
    accepted = pins.accept(served, [c.name for c in changes])
    print(f"accepted: {', '.join(c.name for c in accepted) or 'nothing'}")
    return 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print("not a terminal: pass --yes to accept without asking")
        return False
    return input(question).strip().lower() in ("y", "yes")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mcp_gateway %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per desk poll otherwise
    options = parse(sys.argv[1:] if argv is None else argv)
    try:
        return anyio.run(run, options)
    except PinsError as exc:
        print(f"mcp_gateway: {exc}", file=sys.stderr)
        return 2

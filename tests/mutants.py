"""Check that the suite kills a listed set of guard-line mutations (`make mutants`).

    python tests/mutants.py [--list tests/mutants.toml] [-k TEXT] [--file PATH]... [--every N]
                            [--slice K|auto] [--jobs J] [--database-bound] [--skip-baseline] [--keep]

The list (tests/mutants.toml) names, for each mutation, a file, an exact snippet of its source,
the snippet's mutated replacement and the tests expected to kill it. The runner:

1. checks every entry first: the snippet occurs exactly once, the mutated file still compiles,
   the named test files exist. A snippet that no longer matches is an error, so an edit to a
   guard cannot leave its entry silently testing nothing;
2. copies the working tree (tracked and untracked files, the uncommitted edits included; never
   the ignored ones) to a temporary directory. The working tree itself is never written;
3. runs all the named tests once on the unmutated copy: they must pass, or a "kill" would prove
   nothing;
4. for each mutation: writes it into the copy, runs only that entry's tests (stopping at the
   first failure), puts the original back. With `--jobs J`, J copies work through the list side
   by side, each on a database of its own.

`--every N --slice K` runs the Kth of N interleaved slices of the list (entries K, K+N, ...);
`--slice auto` takes K from the number of commits on HEAD's first-parent line (CI's short run):
the slice moves with every commit landed, so landings of one commit each run every entry within
N of them; a landing of k commits moves it k places, and one of a multiple of N repeats it.

It prints a table (mutation, where, killing test, killed) and exits 0 only when every mutation
was killed. A test run that errors out (a node id that does not exist, a collection error) is an
error, not a kill. Python writes no bytecode in the copy: a mutation and its restored original can
share a size and an mtime second, and a stale .pyc would then run the wrong code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIST = ROOT / "tests" / "mutants.toml"
FIELDS = {"name": str, "file": str, "original": str, "mutated": str, "tests": list}
# `database = "postgresql"`: the killing tests run only there (they skip on SQLite), so the
# mutation is run only with DATABASE_URL on PostgreSQL, and reported as not run elsewhere.
DATABASES = ("postgresql",)


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    database: str = ""  # "" runs on any database


def database_here() -> str:
    return "postgresql" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    line: int
    outcome: str  # "killed", "survived" or "error"
    killer: str
    seconds: float
    log: str


def load(path: Path) -> list[Mutant]:
    entries = tomllib.loads(path.read_text()).get("mutant", [])
    mutants = []
    for number, entry in enumerate(entries, start=1):
        for field, kind in FIELDS.items():
            if not isinstance(entry.get(field), kind) or not entry[field]:
                raise SystemExit(f"{path}: mutant #{number} needs a non-empty {field} ({kind.__name__})")
        unknown = set(entry) - set(FIELDS) - {"database"}
        if unknown:
            raise SystemExit(f"{path}: mutant #{number} has unknown keys {sorted(unknown)}")
        if entry.get("database", DATABASES[0]) not in DATABASES:
            raise SystemExit(f"{path}: mutant #{number}'s database must be one of {DATABASES}")
        mutants.append(Mutant(**{**entry, "tests": tuple(entry["tests"])}))
    return mutants


def problems(mutant: Mutant, root: Path) -> list[str]:
    """What makes this entry unusable against the source under `root` (empty when it is fine)."""
    path = root / mutant.file
    if not path.is_file():
        return [f"{mutant.file} does not exist"]
    source = path.read_text()
    found = []
    count = source.count(mutant.original)
    if count != 1:
        found.append(f"its original snippet occurs {count} times in {mutant.file} (must be exactly once)")
    if mutant.original == mutant.mutated:
        found.append("the mutated snippet equals the original")
    if count == 1 and path.suffix == ".py":
        try:
            compile(source.replace(mutant.original, mutant.mutated), mutant.file, "exec")
        except SyntaxError as exc:
            found.append(f"the mutated file does not compile: {exc}")
    for node in mutant.tests:
        if not (root / node.split("::", 1)[0]).is_file():
            found.append(f"test file of {node} does not exist")
    return found


def copy_tree(dest: Path) -> None:
    """Copy the files git would show (tracked, plus untracked and not ignored) into `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        source = ROOT / name
        if name == ".venv" or not (source.exists() or source.is_symlink()):
            continue  # the venv is linked below; a deleted, uncommitted file is gone
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    venv = ROOT / ".venv"
    if venv.exists():
        (dest / ".venv").symlink_to(venv.resolve())


def job_environment(job: int) -> dict[str, str]:
    """The environment of job `job`'s test runs: on PostgreSQL a database name of its own (the
    test database is made from it), so that side-by-side jobs never share one. On the embedded
    default each run has its own var/ already (tests/pytest_env.py)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    url = env.get("DATABASE_URL", "")
    if job and url.startswith("postgres"):
        base, _, name = url.rpartition("/")
        env["DATABASE_URL"] = f"{base}/{name or 'postgres'}_mutants{job}"
    return env


def run_tests(
    copy: Path, nodes: tuple[str, ...], log: Path, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run `nodes` in `copy`; return pytest's exit code and the first failing node id, if any."""
    python = copy / ".venv" / "bin" / "python"
    command = [str(python if python.exists() else sys.executable), "-m", "pytest", "-q", "-x"]
    command += ["-p", "no:cacheprovider", "-rfE", *nodes]
    env = env or job_environment(0)
    with log.open("w") as out:
        code = subprocess.run(command, cwd=copy, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", log.read_text(), flags=re.MULTILINE)
    return code, failed[0] if failed else ""


def tail(path: Path, lines: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def mutate(copy: Path, mutant: Mutant, log: Path, env: dict[str, str] | None = None) -> Result:
    path = copy / mutant.file
    original = path.read_text()
    line = original[: original.index(mutant.original)].count("\n") + 1
    started = time.monotonic()
    path.write_text(original.replace(mutant.original, mutant.mutated, 1))
    try:
        code, killer = run_tests(copy, mutant.tests, log, env)
    finally:
        path.write_text(original)
    if code == 1 and killer:
        outcome = "killed"
    elif code == 0:
        outcome = "survived"
    else:  # interrupted, internal or usage error, no tests collected: a broken run, not a kill
        outcome, killer = "error", f"pytest exit {code}"
    return Result(mutant, line, outcome, killer, time.monotonic() - started, str(log))


def table(results: list[Result]) -> str:
    rows = [("mutation", "where", "killing test", "killed", "time")]
    for r in results:
        killed = {"killed": "yes", "survived": "NO", "error": "ERROR"}[r.outcome]
        rows.append(
            (r.mutant.name, f"{r.mutant.file}:{r.line}", r.killer or "-", killed, f"{r.seconds:.0f}s")
        )
    widths = [min(max(len(row[i]) for row in rows), 90) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", type=Path, default=DEFAULT_LIST, help="the TOML list of mutations")
    parser.add_argument("-k", dest="only", default="", help="run only mutations whose name contains TEXT")
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        metavar="N",
        help="run every Nth listed mutation (CI's short run); each entry is still checked",
    )
    parser.add_argument(
        "--slice",
        default="0",
        metavar="K",
        help="with --every N: run slice K of N (0..N-1), or 'auto' for HEAD's first-parent commit count mod N",
    )
    parser.add_argument(
        "--file", action="append", default=[], help="run only mutations of this file (repeatable)"
    )
    parser.add_argument("--jobs", type=int, default=1, metavar="J", help="J copies side by side")
    parser.add_argument(
        "--database-bound",
        action="store_true",
        help="run only the mutations bound to a database (CI runs them with DATABASE_URL set)",
    )
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the tests unmutated first")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy and its logs")
    args = parser.parse_args(argv)

    everything = load(args.list)
    listed = [m for m in everything if args.only.lower() in m.name.lower()]
    if args.file:
        listed = [m for m in listed if m.file in args.file]
    if args.database_bound:
        listed = [m for m in listed if m.database]
    if args.every < 1 or args.jobs < 1:
        parser.error("--every and --jobs need a positive number")
    start = slice_of(args.slice, args.every)
    # A stride, not a random pick: a slice is the same on every machine, and it still crosses
    # every part of the list (which is grouped by area).
    mutants = listed[start :: args.every]
    if args.every > 1:
        print(f"slice {start} of {args.every}: {len(mutants)} of {len(listed)} listed mutations", flush=True)
    elsewhere = [m for m in mutants if m.database and m.database != database_here()]
    for mutant in elsewhere:
        print(f"not run here: {mutant.name} (needs DATABASE_URL on {mutant.database})", flush=True)
    mutants = [m for m in mutants if m not in elsewhere]
    if not mutants:
        print("no mutation selected", file=sys.stderr)
        return 2
    # Every listed entry is checked, even one the stride skips: a stale snippet fails fast.
    broken = {m.name: problems(m, ROOT) for m in everything}
    if any(broken.values()):
        for name, found in broken.items():
            for problem in found:
                print(f"mutant {name!r}: {problem}", file=sys.stderr)
        return 2

    jobs = min(args.jobs, len(mutants))
    copies = [Path(tempfile.mkdtemp(prefix=f"rd-mutants-{job}-")) for job in range(jobs)]
    try:
        for copy in copies:
            copy_tree(copy)
            (copy / "var" / "mutants").mkdir(parents=True)
        logs = copies[0] / "var" / "mutants"
        if not args.skip_baseline:
            nodes = tuple(dict.fromkeys(node for m in mutants for node in m.tests))
            print(f"baseline: {len(nodes)} named test(s) on the unmutated copy", flush=True)
            code, failed = run_tests(copies[0], nodes, logs / "baseline.log")
            if code != 0:
                print(tail(logs / "baseline.log"), file=sys.stderr)
                print(
                    f"\nthe named tests fail without any mutation ({failed or f'exit {code}'})",
                    file=sys.stderr,
                )
                return 2
        results = run_all(mutants, copies)
        print()
        print(table(results))
        failures = [r for r in results if r.outcome != "killed"]
        print(f"\n{len(results) - len(failures)} of {len(results)} mutations killed")
        return 1 if failures else 0
    finally:
        for copy in copies:
            if args.keep:
                print(f"kept a copy and its logs in {copy}")
            else:
                shutil.rmtree(copy, ignore_errors=True)


def slice_of(given: str, every: int) -> int:
    if given == "auto":
        # The first-parent line, so that a merged branch moves the slice by one, not by its length.
        counted = subprocess.run(
            ["git", "rev-list", "--count", "--first-parent", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        if counted.returncode != 0 or not counted.stdout.strip().isdigit():
            raise SystemExit(f"--slice auto needs git's commit count of HEAD: {counted.stderr.strip()}")
        return int(counted.stdout) % every
    if not given.isdigit() or int(given) >= every:
        raise SystemExit(f"--slice must be auto or a number from 0 to {every - 1}")
    return int(given)


def run_all(mutants: list[Mutant], copies: list[Path]) -> list[Result]:
    """Each mutation on one of the copies, the copies side by side (a thread each: the work is
    in the pytest processes); results in the list's order."""
    results: dict[int, Result] = {}
    queue = list(enumerate(mutants, start=1))
    lock = threading.Lock()

    def work(job: int, copy: Path) -> None:
        env = job_environment(job)
        while True:
            with lock:
                if not queue:
                    return
                number, mutant = queue.pop(0)
            result = mutate(copy, mutant, copy / "var" / "mutants" / f"mutant-{number}.log", env)
            with lock:
                print(f"[{number}/{len(mutants)}] {mutant.name}: {result.outcome}", flush=True)
                if result.outcome == "error":
                    print(tail(Path(result.log)), file=sys.stderr)
                results[number] = result

    threads = [threading.Thread(target=work, args=(job, copy)) for job, copy in enumerate(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[number] for number in sorted(results)]


if __name__ == "__main__":
    sys.exit(main())

"""Where a command's CPU goes, process by process: the test suite's, say.

    python benchmarks/suite_cpu.py -- make test
    python benchmarks/suite_cpu.py --top 40 -- .venv/bin/python -m pytest -n 2 --dist loadgroup

Runs the command with the kernel's process accounting on (acct(2): a record
of user+sys CPU, start, elapsed time, parent and name for every process that
ends, daemons and killed ones included) and with ``ZEROLOOP_TEST_TIMELINE``
set, so each test process writes when each test ran (tests/conftest.py).
Then it prints the CPU by kind of process (the test processes' own, the
stages forked from the warm server, Ray's, dvc, the MLflow servers, ...)
and the tests whose processes cost the most. A process is charged to the
test that ran in the test process it descends from when it started; a
process outside the test processes' trees (a warm fork, a Ray worker) to the
test whose process lived around it most tightly (the warm server's client
spans its fork), else to its kind alone. In-process work is the test
processes' total: the accounting does not split it by test (their
``--durations`` do).

Linux only, as root (acct(2) needs CAP_SYS_PACCT; the kernel needs BSD
process accounting, version 3 records), with nothing else using the
accounting meanwhile: there is one per machine. Ratios within one run mean
something; seconds do not carry over to another CPU.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: struct acct_v3 (linux/acct.h): 64 bytes, the name in its last 16
_RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
#: comp_t and ac_etime count in AHZ ticks
_AHZ = 100.0
#: set for the command: the accounting file of the run it is part of
_UNDER = "ZEROLOOP_SUITE_CPU"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # epoch seconds
    elapsed: float
    cpu: float  # user + sys seconds
    name: str


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_records(path: Path) -> list[Proc]:
    data = path.read_bytes()
    out = []
    for at in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        f = _RECORD.unpack_from(data, at)
        if f[1] != 3:
            raise ValueError(f"{path}: a version {f[1]} record at byte {at}; this reads version 3 only")
        out.append(Proc(pid=f[6], ppid=f[7], start=f[8], elapsed=f[9] / _AHZ,
                        cpu=(_comp(f[10]) + _comp(f[11])) / _AHZ,
                        name=f[18].split(b"\0")[0].decode(errors="replace")))
    return out


def _acct(path: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"acct({path!r}): {os.strerror(err)} (root, and a kernel with "
                           "BSD process accounting, are needed)")


def read_timeline(path: Path) -> tuple[dict[int, list[tuple[float, float, str]]], set[int]]:
    """(test process pid -> its tests as (start, end, node id), the warm servers' pids)."""
    tests, warm = collections.defaultdict(list), set()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# warm server "):
                warm.add(int(line.split()[-1]))
            elif line and not line.startswith("#"):
                _worker, pid, start, end, nodeid = line.split(" ", 4)
                tests[int(pid)].append((float(start), float(end), nodeid))
    return tests, warm


#: a process's kind by its name, where its ancestry says nothing
_KINDS = (("ray::", "Ray's task workers and actors"), ("raylet", "Ray's daemons"),
          ("gcs_server", "Ray's daemons"), ("dvc", "dvc"), ("mlflow", "MLflow servers"),
          ("uvicorn", "MLflow servers"), ("gunicorn", "MLflow servers"), ("postgres", "PostgreSQL"),
          ("gnugo", "gnugo"), ("chromium", "chromium"), ("objdump", "objdump"), ("git", "git"))


def charge(procs: list[Proc], tests: dict[int, list[tuple[float, float, str]]], warm: set[int] = frozenset()):
    """(CPU by kind, CPU by test): see the module's docstring."""
    by_pid = {p.pid: p for p in procs}
    testers = set(tests)

    def ancestor_in(p: Proc, pids: set[int]) -> int | None:
        seen = 0
        while p is not None and seen < 64:
            if p.ppid in pids:
                return p.ppid
            p, seen = by_pid.get(p.ppid), seen + 1
        return None

    def tester_of(p: Proc) -> int | None:
        return ancestor_in(p, testers)

    def test_at(pid: int, when: int) -> str | None:
        """The test running at ``when`` (a whole second, as the records count): the one that
        overlaps that second most."""
        overlaps = [(min(e, when + 1) - max(s, when), n) for s, e, n in tests.get(pid, ())]
        best = max(overlaps, default=(0.0, None))
        return best[1] if best[0] > 0 else None

    hosts = [(p, t) for p in procs if (t := tester_of(p)) is not None]
    kinds, per_test = collections.Counter(), collections.Counter()
    for p in procs:
        if p.pid in testers:
            kinds["test processes' own (in-process tests)"] += p.cpu
            continue
        if p.pid in warm:
            kinds["the warm server"] += p.cpu
            continue
        tester = tester_of(p)
        if tester is not None:
            kinds["started by a test process (and their children)"] += p.cpu
            test = test_at(tester, p.start)
        else:
            if ancestor_in(p, warm) is not None:
                kinds["forked from the warm server: stages, zeroloop commands (and their children)"] += p.cpu
            else:
                kind = next((k for prefix, k in _KINDS if p.name.startswith(prefix)), None)
                kinds[kind or f"elsewhere: {p.name}"] += p.cpu
            # the tightest process of a test process's tree alive around this one (the warm server's
            # client spans its fork), not a server that outlives a module
            around = [(h, t) for h, t in hosts
                      if h.start <= p.start + 1 and p.start + p.elapsed <= h.start + h.elapsed + 1
                      and h.elapsed <= max(3 * p.elapsed, p.elapsed + 30)]
            test = None
            if around:
                h, t = max(around, key=lambda ht: (ht[0].start, -ht[0].elapsed))
                test = test_at(t, h.start)
        if test:
            per_test[test] += p.cpu
    return kinds, per_test


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s [--top N] [--keep DIR] -- COMMAND [ARG ...]")
    ap.add_argument("--top", type=int, default=30, help="tests to list (default 30)")
    ap.add_argument("--keep", type=Path, help="leave the accounting file and the timeline in DIR")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        ap.error("no command: give it after --")
    if a.top < 0:
        ap.error(f"--top {a.top}: must be 0 or more")
    if os.environ.get(_UNDER):
        print(f"suite_cpu.py: already counting for another run ({os.environ[_UNDER]}): there is one "
              "accounting per machine, and this run would end that one's", file=sys.stderr)
        return 2
    where = Path(a.keep or tempfile.mkdtemp(prefix="suite-cpu-"))
    where.mkdir(parents=True, exist_ok=True)
    try:
        return _count(a, command, where)
    finally:
        if not a.keep:
            shutil.rmtree(where, ignore_errors=True)


def _count(a: argparse.Namespace, command: list[str], where: Path) -> int:
    """Run ``command`` with the accounting on, its records and timeline in ``where``, and print
    where its CPU went; its exit status."""
    records, timeline = where / "pacct", where / "timeline.txt"
    records.write_bytes(b"")
    timeline.unlink(missing_ok=True)
    try:
        _acct(str(records))
    except OSError as exc:
        print(f"suite_cpu.py: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        code = subprocess.run(command, env={**os.environ, "ZEROLOOP_TEST_TIMELINE": str(timeline),
                                            _UNDER: str(records)}).returncode
    finally:
        _acct(None)
    procs, (tests, warm) = read_records(records), read_timeline(timeline)
    kinds, per_test = charge(procs, tests, warm)
    total = sum(kinds.values())
    print(f"\n{len(procs)} processes ended, {total:.1f} CPU-s (user+sys); {sum(map(len, tests.values()))} "
          f"tests in {len(tests)} test processes")
    for kind, cpu in kinds.most_common():
        if cpu >= 0.05:
            print(f"{cpu:9.1f} s {cpu / max(total, 1e-9):6.1%}  {kind}")
    if a.top and per_test:
        print(f"\nthe {min(a.top, len(per_test))} tests whose processes cost the most (their test process's "
              "own CPU not included):")
        for test, cpu in per_test.most_common(a.top):
            print(f"{cpu:9.1f} s  {test}")
    if a.keep:
        print(f"\nkept: {records}, {timeline}")
    return code


if __name__ == "__main__":
    sys.exit(main())

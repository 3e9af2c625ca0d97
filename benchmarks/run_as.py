"""Run any command as a CPU with at most the given instruction set would: the
whole pipeline on a Zen 4 as on an AVX2 CPU, say.

    python benchmarks/run_as.py --isa avx2 -- make repro
    python benchmarks/run_as.py --isa avx2 -- python benchmarks/precision_match.py

Sets the caps of :data:`isa_emulation.ISA_CAPS` (oneDNN,
PyTorch's kernels, fbgemm, MKL, numba, numpy) and, for ``avx2``, puts a copy
of ONNX Runtime that sees no AVX-512 first on ``PYTHONPATH``
(:mod:`isa_emulation`); every process the command starts
inherits them, DVC's stages included, and each stage's machine line names
the caps. Before the command it prints the caps and checks, in a fresh
process with them, which kernel path ONNX Runtime takes (NCHWc block 8: AVX2;
16: AVX-512), and refuses to run the command when the cap did not take.

This is an emulation: the older kernels run on this CPU's cores, clock and
memory, so ratios (int8 over fp32, one option over another) say more than
absolute times. docs/speed.md says which figures were taken this way.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    from isa_emulation import ISA_CAPS, isa_environ

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s --isa {avx2,avx512} [--check-only] -- COMMAND [ARG ...]")
    p.add_argument("--isa", required=True, choices=sorted(ISA_CAPS), help="the most the CPU may use")
    p.add_argument("--check-only", action="store_true", help="print the caps and the check, run nothing")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command and not a.check_only:
        p.error("no command given: put it after --, e.g. -- make repro")

    caps = isa_environ(a.isa)
    env = {**os.environ, **caps}
    for name, value in sorted(caps.items()):
        print(f"{name}={value}")
    probe = f"from isa_emulation import emulation_line; print(emulation_line({a.isa!r}))"
    # `python -c` imports from its working directory: isa_emulation from here
    check = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parent)
    if check.returncode != 0:
        sys.exit(f"run_as: the check failed in a process with the caps:\n{check.stderr.strip()}")
    line = check.stdout.strip()
    print(line, flush=True)
    if a.isa == "avx2" and "AVX2 kernels" not in line:
        sys.exit("run_as: ONNX Runtime did not take its AVX2 path with the caps; not running the command")
    if a.check_only:
        return
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        sys.exit(f"run_as: no such command: {command[0]}")


if __name__ == "__main__":
    main()

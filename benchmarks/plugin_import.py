"""What the pytest plugin costs at pytest start when the suite is not asked for (issue 21).

Installing checkpointkit registers its plugin (``pytest11``) in every pytest session of the
environment, so its import is paid by every project that merely depends on checkpointkit.
The figure is the plugin's import after pytest's own (``import pytest`` first, then the
plugin timed), in ``--runs`` fresh interpreters: the smallest (the least disturbed by other
load on the machine) and the median. A whole pytest start is not compared: on a shared
2-core machine its run-to-run spread is far larger than the plugin's cost.

    .venv/bin/python benchmarks/plugin_import.py --runs 15
"""

from __future__ import annotations

import argparse
import subprocess
import sys

IMPORT = (
    "import time, pytest; t = time.perf_counter(); "
    "import checkpointkit.conformance.plugin; print(time.perf_counter() - t)"
)


def _import_seconds() -> float:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT], capture_output=True, text=True, check=True
    ).stdout
    return float(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    imports = sorted(_import_seconds() for _ in range(args.runs))
    print(
        f"plugin import after pytest's: min {imports[0] * 1e3:.1f} ms, "
        f"median {imports[len(imports) // 2] * 1e3:.1f} ms ({args.runs} runs)"
    )


if __name__ == "__main__":
    main()

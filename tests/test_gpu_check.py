"""scripts/gpu_check.sh without a GPU: it parses, asks for its log folder, and every script it runs
exists and accepts the arguments it is given."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_it_parses_and_needs_a_log_folder():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "usage: scripts/gpu_check.sh LOG_DIR [BASELINE_RUN]" in done.stderr


def test_the_scripts_it_runs_exist_and_take_its_arguments():
    text = SCRIPT.read_text()
    calls = re.findall(r"python3 (scripts/\S+\.py)([^>\\\n]*)", text)
    assert {c[0] for c in calls} == {"scripts/launch_target.py"}
    for path, args in calls:
        assert (ROOT / path).is_file(), path
        argv = shlex.split(args) + ["--dry-run"]
        done = subprocess.run([sys.executable, str(ROOT / path), *argv], capture_output=True, text=True,
                              cwd=ROOT, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, (path, argv, done.stderr)
        assert done.stdout.strip(), (path, argv)

"""Run a hostile spec corpus through ``phalanx submit`` against a fresh control plane, and count what went wrong.

Usage: ``python benchmarks/hostile_corpus.py [DIR]`` (or ``scripts/hostile-corpus``). DIR holds the spec files
and, optionally, a ``manifest.json`` of file name -> ``refuse``/``accept``/``any``; without DIR the fuzz tier's
corpus (``tests/fuzz/corpus.py``, about 450 files) is written to a temporary directory first. A corpus someone
else wrote works the same way (without a manifest, only tracebacks, hangs and crashes are judged).

For each file, one real ``phalanx submit FILE`` process, with a per-file timeout. A file's outcome:

- ``accepted`` (exit 0) or ``refused`` (exit 2 and ``error:`` lines), the two clean answers;
- ``failed`` (exit 1 with ``error:``, e.g. a name already taken), clean but neither;
- ``traceback`` (the output holds one), ``hang`` (the timeout passed), ``unclean`` (another exit code, or a
  failure that does not start with ``error:``), ``crash`` (the control plane died or stopped leading after it).

``miss`` counts files the manifest says must be refused that were not. After the corpus, a good job must still
run to Succeeded (``phalanx run``), and ``phalanx down`` then ``phalanx up`` must work. The last line is
``RESULT files=N tracebacks=T hangs=H accepted=A refused=R crashes=C misses=M good_job=... restart=...``; the
exit status is 0 only when tracebacks, hangs, crashes and unclean answers are all 0 and the good job ran.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOOD_JOB = """apiVersion: phalanx.dev/v1alpha1
kind: TrainingJob
metadata: {name: good-after-corpus}
spec:
  replicas:
    worker:
      template: {command: ["true"], resources: {cpu: 100m, memory: 64Mi}}
"""


@dataclass(frozen=True)
class FileResult:
    """One file's outcome."""

    name: str
    outcome: str
    code: int | None
    seconds: float
    verdict: str
    first_line: str

    @property
    def missed(self) -> bool:
        """A file the manifest says must be refused that was not."""
        return self.verdict == "refuse" and self.outcome not in ("refused", "hang", "traceback", "crash")


class Phalanx:
    """The real CLI on one state directory."""

    def __init__(self, state_dir: Path, work_dir: Path) -> None:
        self.env = {**os.environ, "PHALANX_HOME": str(state_dir), "COLUMNS": "200"}
        self.env.pop("PHALANX_BACKEND", None)
        self.work_dir = work_dir

    def __call__(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str] | None:
        """Run ``phalanx ARGS``; None when it ran past ``timeout`` (it is killed, with its process group)."""
        process = subprocess.Popen(
            [sys.executable, "-m", "phalanx.entrypoints.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=self.env,
            cwd=self.work_dir,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def leader_pid(phalanx: Phalanx) -> int | None:
    """The pid `phalanx status` reports as leading, or None."""
    answer = phalanx("status", timeout=30)
    if answer is None or answer.returncode != 0:
        return None
    found = re.search(r"\(pid (\d+)", answer.stdout)
    return int(found.group(1)) if found else None


def pid_alive(pid: int | None) -> bool:
    """Whether a process of that pid exists (and is not a zombie)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def classify(answer: subprocess.CompletedProcess[str] | None, leader_alive: bool) -> str:
    """A file's outcome from the CLI's answer and the control plane's health after it."""
    if answer is None:
        return "hang"
    text = answer.stdout + answer.stderr
    if "Traceback" in text:
        return "traceback"
    if not leader_alive:
        return "crash"
    lines = [line for line in answer.stderr.splitlines() if line.strip()]
    clean = bool(lines) and lines[0].startswith("error: ")
    if answer.returncode == 0:
        return "accepted"
    if answer.returncode == 2 and clean:
        return "refused"
    if answer.returncode == 1 and clean:
        return "failed"
    return "unclean"


def run_corpus(directory: Path, *, timeout: float, state_dir: Path) -> tuple[list[FileResult], dict[str, str]]:
    """Submit every file of ``directory`` to a fresh control plane; return the results and the closing checks."""
    manifest_path = directory / "manifest.json"
    manifest: dict[str, str] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != "manifest.json")
    phalanx = Phalanx(state_dir, directory)
    up = phalanx("up", timeout=60)
    if up is None or up.returncode != 0:
        raise SystemExit(f"phalanx up failed: {up.stderr if up else 'timed out'}")
    pid = leader_pid(phalanx)
    results = []
    for path in files:
        started = time.monotonic()
        answer = phalanx("submit", str(path), timeout=timeout)
        seconds = time.monotonic() - started
        alive = pid_alive(pid)
        if not alive:  # note the crash, then give the next file a control plane again
            phalanx("up", timeout=60)
            pid = leader_pid(phalanx)
        outcome = classify(answer, alive)
        first = ""
        if answer is not None:
            lines = [line for line in (answer.stderr or answer.stdout).splitlines() if line.strip()]
            first = lines[0] if lines else ""
        code = answer.returncode if answer else None
        results.append(FileResult(path.name, outcome, code, seconds, manifest.get(path.name, "any"), first))
    closing = {"good_job": "not-run", "restart": "not-run"}
    good = directory.parent / "good-after-corpus.yaml"
    good.write_text(GOOD_JOB)
    answer = phalanx("run", str(good), "--no-logs", timeout=120)
    closing["good_job"] = "Succeeded" if answer is not None and answer.returncode == 0 else "failed"
    down = phalanx("down", timeout=60)
    up = phalanx("up", timeout=60)
    ok = down is not None and up is not None and down.returncode == 0 and up.returncode == 0
    closing["restart"] = "ok" if ok and pid_alive(leader_pid(phalanx)) else "failed"
    phalanx("down", timeout=60)
    return results, closing


def report(results: list[FileResult], closing: dict[str, str]) -> tuple[str, bool]:
    """The table, the summary line, and whether the run is clean."""
    rows = [f"{'FILE':44} {'VERDICT':7} {'OUTCOME':9} {'EXIT':>4} {'SECONDS':>7}  FIRST LINE"]
    for r in results:
        code = "-" if r.code is None else str(r.code)
        flag = " MISS" if r.missed else ""
        line = f"{r.name[:44]:44} {r.verdict:7} {r.outcome:9} {code:>4} {r.seconds:7.1f}  {r.first_line[:90]}"
        rows.append(line + flag)
    counts = Counter(r.outcome for r in results)
    misses = sum(r.missed for r in results)
    rows.append("")
    rows.append("outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    result = (
        f"RESULT files={len(results)} tracebacks={counts['traceback']} hangs={counts['hang']} "
        f"accepted={counts['accepted']} refused={counts['refused']} crashes={counts['crash']} "
        f"unclean={counts['unclean']} failed={counts['failed']} misses={misses} "
        f"good_job={closing['good_job']} restart={closing['restart']}"
    )
    rows.append(result)
    clean = (
        not (counts["traceback"] or counts["hang"] or counts["crash"] or counts["unclean"])
        and closing["good_job"] == "Succeeded"
        and closing["restart"] == "ok"
    )
    return "\n".join(rows), clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, help="the corpus (default: write tests/fuzz/corpus.py's)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per file (default 20)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phalanx-hostile-") as temporary:
        root = Path(temporary)
        directory = args.directory
        if directory is None:
            sys.path.insert(0, str(REPO / "tests"))
            from fuzz.corpus import write_corpus

            directory = root / "corpus"
            write_corpus(directory)
        results, closing = run_corpus(directory.resolve(), timeout=args.timeout, state_dir=root / "state")
    text, clean = report(results, closing)
    print(text)
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a benchmark runs and how its repeats are kept: the device, fresh processes, the
spread of repeats, and result files with a section per device kind."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from posjax import fileio
from posjax.runlock import exclusive

ROOT = Path(__file__).resolve().parents[2]  # the repository: configs/, scripts/, experiments/
BENCHMARKS = ROOT / "benchmarks"  # where benchlib imports from


def host_cpu() -> dict[str, str]:
    """The host CPU's name, vendor, family and model as /proc/cpuinfo gives them (a VM's
    name can be generic, "Intel(R) Xeon(R) Processor": family and model tell its generation);
    the platform's processor name alone where there is no /proc/cpuinfo."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    first = dict((k.strip(), v.strip()) for k, _, v in (
        line.partition(":") for line in text.split("\n\n")[0].splitlines()))
    info = {"name": first.get("model name") or platform.processor() or platform.machine()}
    for field, key in (("vendor_id", "vendor"), ("cpu family", "family"), ("model", "model")):
        if field in first:
            info[key] = first[field]
    return info


def cpu_key(cpu: dict[str, str]) -> str:
    """A result file's section for this host's CPUs: cpu@VENDOR-FAMILY-MODEL (the figures of
    two kinds of CPU never share one); plain "cpu" for the records made before kinds were
    told apart."""
    return "cpu@" + "-".join(cpu.get(k, "?") for k in ("vendor", "family", "model"))


def device() -> dict:
    """The first device's platform and kind, how many there are, and the host's CPUs."""
    first = jax.devices()[0]
    return {"platform": first.platform, "device_kind": first.device_kind,
            "count": jax.device_count(), "cpu_count": os.cpu_count(), "cpu": host_cpu()}


def load() -> dict:
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them."""
    return dict(zip(("1min", "5min", "15min"), os.getloadavg(), strict=True))


def verdict(met: bool) -> str:
    """How a target line ends: a target is met only where the median meets it."""
    return "met" if met else "NOT met"


def describe() -> str:
    """One line naming the device, the host's CPUs, jax's version and the machine's load."""
    info = device()
    return (f"device: {info['platform']} ({info['device_kind']}) x {info['count']}, "
            f"{info['cpu_count']} CPUs ({info['cpu']['name']}, {cpu_key(info['cpu'])}); "
            f"jax {jax.__version__}; load {load()}")


def fresh_device() -> tuple[dict, str]:
    """(device(), describe()) from a fresh process: a benchmark whose work runs in other
    processes keeps this one off the accelerator (JAX takes most of a GPU's memory)."""
    code = ("import sys; from posjax import fileio; from benchlib.runs import describe, device; "
            "fileio.write_json(sys.argv[1], {'device': device(), 'line': describe()})")
    result = fresh_result(["-c", code], cwd=BENCHMARKS)
    return result["device"], result["line"]


def fresh_result(command: list[str], **run) -> dict:
    """The JSON a fresh Python process running `command` (a script and its arguments, the
    last one a flag that takes the output path) writes to the path appended to it;
    `run`: subprocess.run's keywords. A failed process is one error with its exit status
    (and the end of its stderr, when `run` captures it)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        done = subprocess.run([sys.executable, *command, str(out)], check=False, **run)
        if done.returncode or not out.exists():
            stderr = done.stderr.decode() if isinstance(done.stderr, bytes) else done.stderr
            raise RuntimeError(f"{' '.join(command[:2])} failed with exit status "
                               f"{done.returncode}" + (f": {stderr[-2000:]}" if stderr else ""))
        return fileio.read_json(out)


def in_processes(processes: int, command: list[str], **run) -> list[dict]:
    """fresh_result(command) of `processes` fresh processes, one after another."""
    results = []
    for index in range(processes):
        print(f"-- process {index + 1} of {processes}", flush=True)
        results.append(fresh_result(command, **run))
    return results


def tagged(per_process: list[list[dict]]) -> list[dict]:
    """Every process's repeats in one list, each tagged with the index of its process."""
    return [dict(repeat, process=index) for index, repeats in enumerate(per_process)
            for repeat in repeats]


def spread(values: list[float]) -> dict:
    """The median, min and max of repeats, and how many there are."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def summarise(row: dict, keys: tuple[str, ...], over: str = "rounds") -> dict:
    """row with each key set to the median over row[over] (a list of repeats), plus key_min
    and key_max."""
    for key in keys:
        values = [repeat[key] for repeat in row[over]]
        row.update({key: statistics.median(values), f"{key}_min": min(values),
                    f"{key}_max": max(values)})
    return row


def device_section(path: Path, measured: tuple[dict, str] | None = None) -> tuple[dict, dict]:
    """(the JSON file's content, the section of this device kind in it), the device printed:
    figures from a GPU or TPU go beside the CPU ones. `measured`: (device(), describe()) as
    fresh_device gives them, instead of this process's."""
    info, line = measured or (device(), describe())
    print(line, flush=True)
    out = fileio.read_json(path, {})
    kind = cpu_key(info["cpu"]) if info["platform"] == "cpu" else info["device_kind"]
    mine = out.setdefault(kind, {})
    mine["device"] = info
    return out, mine


def record(path: Path, out: dict, mine: dict, section: str, result: dict) -> None:
    """Put one section's result, dated, into this device's section (`mine`, of `out`), and
    write it into the file read again under a lock: what another run wrote there since
    `device_section` read it stays."""
    mine[section] = {**result, "date": time.strftime("%Y-%m-%d")}
    kind = next(key for key, value in out.items() if value is mine)
    rewrite(path, lambda fresh: fresh.setdefault(kind, {}).update(
        device=mine["device"], **{section: mine[section]}))


def rewrite(path: str | Path, change) -> None:
    """Read the JSON file at `path` again under a lock, `change` its content (a dict, {} for
    no file) in place and write it atomically: what other runs wrote into it stays."""
    with exclusive(f"{path}.lock"):
        content = fileio.read_json(path, {})
        change(content)
        fileio.write_json(path, content)

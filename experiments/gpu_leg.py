#!/usr/bin/env python3
"""A leg of a long run on a lent GPU machine (the `device` tool), and its way back.

The device takes at most 64 MiB of working tree and returns at most 64 MiB in files of 16 MiB,
and its image lacks gymnasium and ale-py. So, with the run stopped here (SIGTERM):

    python -m experiments.gpu_leg pack ~/runs/NAME --wheels ~/runs/gpu_wheels

writes `.gpu/NAME.tar` (the run without its TensorBoard files and older checkpoints; a run
stopped before its first checkpoint gathers its first labels and pretrains there) and copies
the wheels into `.whl/`, both ignored by git, and prints the command to `run` there with
`carry` [".gpu", ".whl"]. That command resumes the run on the GPU, stops it with SIGTERM after
`--seconds` (sooner if what comes back would pass the device's limit), and leaves in $OUT what
changed: the newest checkpoint, the store, the predictor, the new TensorBoard files,
`command.txt` and `machines.txt`, and as many of the leg's other policy checkpoints (weights
only) as fit, evenly spaced. Back here:

    python -m experiments.gpu_leg unpack ~/runs/NAME FILES_AT

puts them into the run directory, keeping its `settings.json`: the next `--resume` here runs on
the CPU again. `machines.txt` records where each leg ran.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launch.rundir import COMMAND_FILE, MACHINES_FILE, PREFS_FILE  # noqa: E402

PACK_DIR, WHEEL_DIR = ".gpu", ".whl"  # in the checkout, ignored by git, carried to the device
PART_BYTES = 16 * 2**20  # the device's limits on the files it returns: 16 MiB each,
BACK_BYTES = 60 * 2**20  # 64 MiB in all (4 MiB kept spare)
CARRY_BYTES = 64 * 2**20  # ... and on the working tree it takes
# A leg stops early past this much to send back: room for the labels taken while it stops
FULL_BYTES, POLL_S = BACK_BYTES - 6 * 2**20, 5
# The README's GPU flags, and threads for the machine's 16 cores: A2C's (its rewards come from a
# CPU copy of the predictor), the envs' and the trainer's.
DEVICE_FLAGS = ["--device", "cuda", "--reward_predictor_device", "cuda",
                "--reward_predictor_duty", "1", "--torch_threads", "4", "--env_threads", "8",
                "--reward_predictor_threads", "4"]


def _policies(run_dir: Path) -> list[Path]:
    from a2c.config import checkpoints
    return checkpoints(run_dir / "policy")


def _store_copy(src: Path) -> bytes:
    """The label store as one consistent file, its write-ahead log folded in."""
    with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(":memory:")) as b:
        a.backup(b)
        return b.serialize()


def _weights_only(checkpoint: Path) -> bytes:
    """A policy checkpoint without its optimiser state (`a2c.checkpoint.save_policy_weights`'s
    form, half the size), which `experiments.evaluate` and `run_checkpoint.py` play."""
    from a2c.checkpoint import load_policy_weights, save_policy_weights

    buf = io.BytesIO()
    save_policy_weights(buf, load_policy_weights(checkpoint))
    return buf.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))


def pack(run_dir: Path, wheels: Path | None, seconds: int, root: Path = ROOT) -> int:
    """Write `root`/.gpu/NAME.tar and `root`/.whl/; print the device command."""
    if not (run_dir / "settings.json").is_file():
        print(f"error: {run_dir} is not a run directory (no settings.json)", file=sys.stderr)
        return 2
    policies = _policies(run_dir)  # none yet: the leg starts policy training there
    name = run_dir.name
    # one leg travels at a time: an earlier run's pack left here would be carried too
    shutil.rmtree(root / PACK_DIR, ignore_errors=True)
    (root / PACK_DIR).mkdir()
    out = root / PACK_DIR / f"{name}.tar"
    with tarfile.open(out, "w") as tar:
        for f in ("settings.json", COMMAND_FILE, MACHINES_FILE):
            if (run_dir / f).is_file():
                tar.add(run_dir / f, f"{name}/{f}")
        if (run_dir / "reward_predictor").is_dir():
            tar.add(run_dir / "reward_predictor", f"{name}/reward_predictor")
        if policies:
            tar.add(policies[-1], f"{name}/policy/{policies[-1].name}")
        if (run_dir / PREFS_FILE).is_file():
            _add(tar, f"{name}/{PREFS_FILE}", _store_copy(run_dir / PREFS_FILE))
    if wheels is not None:
        shutil.rmtree(root / WHEEL_DIR, ignore_errors=True)
        shutil.copytree(wheels, root / WHEEL_DIR)
    exclude = root / ".git" / "info" / "exclude"
    if exclude.parent.is_dir():
        lines = exclude.read_text().splitlines() if exclude.is_file() else []
        new = [f"/{d}/" for d in (PACK_DIR, WHEEL_DIR) if f"/{d}/" not in lines]
        if new:
            exclude.write_text("\n".join(lines + new) + "\n")
    carried = sum(f.stat().st_size for d in (PACK_DIR, WHEEL_DIR) if (root / d).is_dir()
                  for f in (root / d).rglob("*") if f.is_file())
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB; with the wheels "
          f"{carried / 2**20:.1f} MiB to carry beside the checkout, the device takes "
          f"{CARRY_BYTES / 2**20:.0f} MiB in all)")
    print("run there, carry [\".gpu\", \".whl\"]:")
    print(f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
          f"--target /tmp/site {WHEEL_DIR}/*.whl && export PYTHONPATH=/tmp/site || exit; "
          f"python3 -m experiments.gpu_leg leg {name} --seconds {seconds}")
    return 0


def _bytes_to_send(run_dir: Path) -> int:
    """About what `_send_back` must send whatever else fits: the store (with its write-ahead
    log), the predictor, the newest checkpoint and the TensorBoard files."""
    paths = [*run_dir.glob(f"{PREFS_FILE}*"), *(run_dir / "reward_predictor").rglob("*"),
             *(run_dir / "tb").rglob("*"), *_policies(run_dir)[-1:]]
    return sum(p.stat().st_size for p in paths if p.is_file())


def leg(name: str, seconds: int, out_dir: Path, extra: list[str], root: Path = ROOT,
        work: Path = Path("/tmp/gpu_leg"), full_bytes: int = FULL_BYTES) -> int:
    """On the device: resume the run carried in `root`/.gpu on the GPU for `seconds` (in
    `work`), stop it with SIGTERM, and leave what changed in `out_dir` as parts of PART_BYTES.
    The run is stopped sooner when what must come back passes `full_bytes`."""
    run_dir = work / name
    if not run_dir.is_dir():  # a warm machine keeps the run from the leg before
        work.mkdir(parents=True, exist_ok=True)
        with tarfile.open(root / PACK_DIR / f"{name}.tar") as tar:
            tar.extractall(work, filter="data")
    before = {p.name for p in _policies(run_dir)}
    started = time.time()
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "--resume", str(run_dir),
                             *DEVICE_FLAGS, *extra], cwd=ROOT, start_new_session=True)
    while proc.poll() is None and time.time() - started < seconds:
        time.sleep(min(POLL_S, max(0.0, seconds - (time.time() - started))))
        if proc.poll() is None and _bytes_to_send(run_dir) > full_bytes:  # Enduro: 32 KB a label
            print("leg: what it would send back nears the device's limit; stopping it early",
                  flush=True)
            break
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # the run saves everything and stops
        proc.wait()
    print(f"leg: {time.time() - started:.0f} s, exit status {proc.returncode}", flush=True)
    sent = _send_back(run_dir, before, out_dir)  # whatever the run did, what it saved comes back
    return sent or (0 if proc.returncode in (0, 128 + signal.SIGTERM) else proc.returncode)


def _send_back(run_dir: Path, before: set[str], out_dir: Path) -> int:
    name = run_dir.name
    policies = _policies(run_dir)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in (COMMAND_FILE, MACHINES_FILE, "tb"):  # tb: only the device's event files
            if (run_dir / f).exists():  # (a run refused at its start writes none of them)
                tar.add(run_dir / f, f"{name}/{f}")
        _add(tar, f"{name}/{PREFS_FILE}", _store_copy(run_dir / PREFS_FILE))
        for f in ["reward_predictor", *(f"policy/{p.name}" for p in policies[-1:])]:
            if (run_dir / f).exists():  # (a leg stopped before policy training has neither)
                tar.add(run_dir / f, f"{name}/{f}")
        # the leg's other checkpoints, weights only, evenly spaced, as many as fit
        others = [p for p in policies[:-1] if p.name not in before]
        if others:
            size = len(_weights_only(others[0])) + 1024
            chosen = evenly(others, (BACK_BYTES - buf.tell()) // size)
            for p in chosen:
                _add(tar, f"{name}/policy/{p.name}", _weights_only(p))
            print(f"leg: {len(chosen)} of the leg's {len(others)} other checkpoints sent back "
                  "(weights only)")
    data = buf.getvalue()
    if len(data) > BACK_BYTES + 4 * 2**20:
        print(f"error: {len(data) / 2**20:.1f} MiB to send back, over the device's limit",
              file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for k in range(0, len(data), PART_BYTES):
        (out_dir / f"{name}.leg.{k // PART_BYTES}").write_bytes(data[k:k + PART_BYTES])
    n = -(-len(data) // PART_BYTES)
    print(f"leg: {len(data) / 2**20:.1f} MiB sent back in {n} part{'s' if n > 1 else ''}")
    return 0


def evenly(items: list, k: int) -> list:
    """At most `k` of `items`, evenly spaced, the first and the last among them."""
    if k >= len(items):
        return list(items)
    if k <= 1:
        return items[-1:] if k == 1 else []
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def unpack(run_dir: Path, files_at: Path) -> int:
    """Put a leg's parts into the run directory, keeping its settings.json."""
    name = run_dir.name
    parts = sorted(files_at.rglob(f"{name}.leg.*"), key=lambda p: int(p.suffix[1:]))
    if not parts:
        print(f"error: no {name}.leg.* parts under {files_at}", file=sys.stderr)
        return 2
    data = b"".join(p.read_bytes() for p in parts)
    for stale in (f"{PREFS_FILE}-wal", f"{PREFS_FILE}-shm"):  # the store comes back whole
        (run_dir / stale).unlink(missing_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{name}/")
                   and m.name != f"{name}/settings.json"]
        tar.extractall(run_dir.parent, members=members, filter="data")
    print(f"unpacked {len(members)} files into {run_dir}; resume here with "
          f"python run.py --resume {run_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    a = sub.add_parser("pack", help="here: the stopped run and the wheels, to carry")
    a.add_argument("run_dir", type=Path)
    a.add_argument("--wheels", type=Path, default=None,
                   help="a folder of wheels the device lacks (gymnasium, ale-py, ...)")
    a.add_argument("--seconds", type=int, default=540, help="the leg's length (default 540)")
    b = sub.add_parser("leg", help="on the device: resume, stop after --seconds, send back")
    b.add_argument("name")
    b.add_argument("--seconds", type=int, default=540)
    b.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    b.epilog = "more run.py flags for the leg go last, after --"
    c = sub.add_parser("unpack", help="here: the parts a leg sent back, into the run directory")
    c.add_argument("run_dir", type=Path)
    c.add_argument("files_at", type=Path)
    argv = sys.argv[1:] if argv is None else argv
    # run.py's own flags follow "--" (argparse's REMAINDER would also swallow --seconds)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = p.parse_args(argv[:cut]), argv[cut + 1:]
    if extra and args.verb != "leg":
        p.error(f"only leg takes run.py flags after --, not {args.verb}")
    if args.verb == "pack":
        return pack(args.run_dir.expanduser(), args.wheels and args.wheels.expanduser(),
                    args.seconds)
    if args.verb == "leg":
        return leg(args.name, args.seconds, args.out, extra)
    return unpack(args.run_dir.expanduser(), args.files_at)


if __name__ == "__main__":
    sys.exit(main())

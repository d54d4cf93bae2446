import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    import torch
    torch.set_num_threads(1)
    config.addinivalue_line("markers", "slow: long learning runs, not in the default suite")


@pytest.fixture
def sighup_by_default():
    """SIGHUP's default action in the test and the processes it starts: a run keeps a SIGHUP
    that its parent ignored (`nohup`), so under `nohup pytest` a stop by SIGHUP would do nothing."""
    old = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, old)


@pytest.fixture
def stop_handlers_restored():
    """The handlers of the signals that stop a run, put back after a test that installs them."""
    from launch import stopping

    handlers = {sig: signal.getsignal(sig) for sig in stopping.STOP_SIGNALS}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.fixture
def xvfb():
    """A private X display; Xvfb picks a free number itself (`-displayfd`), so that tests running
    side by side never race for one."""
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x720x24",
                             "-dpi", "96", "-wr", "-nolisten", "tcp"], pass_fds=(write,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as chosen:
            ready = select.select([chosen], [], [], 10.0)[0]
            number = chosen.readline().strip() if ready else ""
        if not number.isdigit():
            raise RuntimeError(f"Xvfb gave no display number within 10 s (exit status "
                               f"{proc.poll()})")
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(5)

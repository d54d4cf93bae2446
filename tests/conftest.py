import os
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config):
    import torch
    torch.set_num_threads(1)
    config.addinivalue_line("markers", "slow: long learning runs, not in the default suite")

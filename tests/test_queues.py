"""A queue read through a thread (the trainer's labels, the supervisor's tracebacks): a message
its sender was killed part-way through writing holds up only that thread."""
import multiprocessing as mp
import queue
import threading
import time

import numpy as np
import pytest

from runtime.queues import QueueReader
from tests.helpers import Unpicklable, wait_until, write_half_a_message


def test_a_half_written_message_holds_up_only_the_reading_thread():
    q = mp.get_context("spawn").Queue()
    reader = QueueReader(q)
    q.put({"label": 1})
    got = []
    wait_until(lambda: _take(reader, got), 10, "the whole label handed on")
    assert got == [{"label": 1}]
    write_half_a_message(q)  # a sender killed part-way through a large label
    time.sleep(0.2)  # the reading thread is now inside that message
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        reader.get_nowait()  # the reading thread waits for the rest; this process does not
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("error", [RuntimeError, EOFError, ValueError])
def test_an_item_that_cannot_be_read_is_raised_to_the_reader_and_the_next_still_comes(error):
    """As reading the queue itself would: the process fails, rather than train on without the
    labels behind it; also where the unpickling raises what a closed queue would."""
    q = mp.get_context("spawn").Queue()
    reader = QueueReader(q)
    q.put(Unpicklable(error))
    q.put({"label": 2})
    wait_until(lambda: not reader._items.empty(), 10, "the item read")  # noqa: SLF001
    with pytest.raises(error, match="does not unpickle"):
        reader.get_nowait()
    assert reader.get(timeout=10) == {"label": 2}


def test_a_queue_closed_in_the_reading_process_ends_its_reader():
    q = mp.get_context("spawn").Queue()
    q.close()
    reader = QueueReader(q, name="closed-queue-reader")
    with pytest.raises(queue.Empty):
        reader.get(timeout=0.5)
    wait_until(lambda: not any(t.name == "closed-queue-reader" for t in threading.enumerate()),
               10, "the reading thread ended")


def _take(reader: QueueReader, got: list) -> bool:
    try:
        got.append(reader.get_nowait())
    except queue.Empty:
        return False
    return True


def test_the_predictor_trainer_takes_its_labels_past_a_half_written_one(tmp_path):
    """The trainer's steps read the labelling process's queue through the thread: taking labels
    returns at once with a half-written label in the pipe, so the trainer goes on to its stop."""
    from types import SimpleNamespace

    from reward_predictor.config import TrainerConfig, TrainerStats
    from reward_predictor.process import PredictorTraining
    from reward_predictor.shared import SharedWeights
    from tests.helpers import moving_dot_pref

    ctx = mp.get_context("spawn")
    labels = ctx.Queue()
    channels = SimpleNamespace(preferences=labels, reward_weights=SharedWeights(ctx),
                               stop=ctx.Event())
    training = PredictorTraining(TrainerConfig(env_kind="moving_dot", ensemble_size=1), channels,
                                 stats=TrainerStats.create(ctx), log_dir=str(tmp_path))
    try:
        labels.put(moving_dot_pref(np.random.default_rng(0), is_validation=False))
        wait_until(lambda: (training.take_labels(), training.has_labels)[1], 10, "a label taken")
        write_half_a_message(labels)
        time.sleep(0.2)  # the reading thread is now inside it
        start = time.monotonic()
        training.take_labels()
        assert time.monotonic() - start < 1.0
    finally:
        training.telemetry.close()
        channels.reward_weights.release()

"""The trainer borrows A2C's idle threads only while that makes its steps faster."""
from reward_predictor.threads import PROBE_EVERY_STEPS, ThreadChoice


def run(choice: ThreadChoice, seconds: dict[int, float], steps: int, waiting: bool = True
        ) -> list[int]:
    """`steps` steps taking seconds[threads] each; the thread counts chosen."""
    chosen = []
    for _ in range(steps):
        n = choice.threads(waiting)
        choice.record(n, seconds[n])
        chosen.append(n)
    return chosen


def test_a_busy_agent_keeps_its_thread():
    assert set(run(ThreadChoice(1, 2), {1: 0.2, 2: 0.1}, 5, waiting=False)) == {1}
    assert set(run(ThreadChoice(1, 1), {1: 0.2}, 5)) == {1}  # nothing to borrow


def test_borrowing_stops_while_a_neighbour_makes_it_slower_and_comes_back_after():
    choice = ThreadChoice(1, 2)
    alone = {1: 0.22, 2: 0.14}  # seconds a step on one and on two threads, machine alone
    assert run(choice, alone, 10)[-5:] == [2] * 5 and choice.borrowing_pays
    # a busy process in another Linux session: a two-thread step stalls
    crowded = {1: 0.23, 2: 1.6}
    chosen = run(choice, crowded, 2 * PROBE_EVERY_STEPS)
    assert not choice.borrowing_pays and chosen[:2] == [2, 2]  # two slow steps to see it
    assert chosen[2:].count(2) <= 2  # then only the probes borrow
    chosen = run(choice, alone, 3 * PROBE_EVERY_STEPS)  # the neighbour is gone
    assert choice.borrowing_pays and chosen[-10:] == [2] * 10


def test_pretraining_runs_each_step_on_the_threads_chosen_and_records_its_time():
    import torch

    from clips.clip import Preference
    from reward_predictor import MovingDotRewardNet, RewardPredictorEnsemble, RewardPredictorTrainer
    from tests.helpers import dot_clip

    class Seen(ThreadChoice):
        def record(self, threads: int, seconds: float) -> None:
            steps.append((threads, torch.get_num_threads(), seconds))
            super().record(threads, seconds)

    steps: list[tuple[int, int, float]] = []
    trainer = RewardPredictorTrainer(RewardPredictorEnsemble(MovingDotRewardNet, ensemble_size=1),
                                     batch_size=8, seed=0)
    for x in range(16):
        trainer.add(Preference(dot_clip(40 + x), dot_clip(x), 1.0))  # nearer the centre better
    before = torch.get_num_threads()
    try:
        trainer.pretrain(3, threads=Seen(1, 2))
    finally:
        torch.set_num_threads(before)
    assert len(steps) == 3 * 2  # every step of 3 epochs of 16 labels in batches of 8
    assert all(chosen == running and seconds > 0 for chosen, running, seconds in steps)
    assert {chosen for chosen, _, _ in steps} == {1, 2}  # each tried

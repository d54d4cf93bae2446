"""Adaptive L2 regularisation of the reward predictor.

App. A: the L2 coefficient is adjusted to keep the validation loss between 1.1 and 1.5 times the
training loss; Ibarz et al. (2018) spell it out: raise the weight when the validation loss exceeds
1.5x the training loss, lower it below 1.1x, starting from 1e-4. Each ensemble member has its own
coefficient and is judged on its own losses.
"""
from __future__ import annotations

import math
from typing import Sequence

INITIAL_ADAPTIVE_L2 = 1e-4  # Ibarz et al. 2018: initial L2 weight of the adaptive scheme
LOW_RATIO = 1.1  # App. A: below 1.1x the training loss the predictor is under-fitting: lower L2
HIGH_RATIO = 1.5  # App. A: above 1.5x it is over-fitting: raise L2
# Neither paper gives the step; x/÷ 1.2 per validation pass moves the coefficient 10x in ~13 passes.
ADAPT_FACTOR = 1.2
MIN_L2 = 1e-8  # floor for a coefficient that is raised from 0 or keeps being lowered


def adapt_l2(l2: Sequence[float], val_loss: Sequence[float], train_loss: Sequence[float],
             low: float = LOW_RATIO, high: float = HIGH_RATIO, factor: float = ADAPT_FACTOR,
             min_l2: float = MIN_L2) -> list[float]:
    """New L2 coefficient of each member from its validation and training losses.

    Multiplied by `factor` when val > high * train, divided by it when val < low * train, left
    alone in between or when either loss is NaN (no labels of that kind yet). Never negative: a
    raised coefficient is at least `min_l2`, a lowered one stops at `min_l2` (and 0 stays 0).
    """
    assert len(l2) == len(val_loss) == len(train_loss), (len(l2), len(val_loss), len(train_loss))
    assert factor > 1.0 and 0.0 < low <= high and min_l2 >= 0.0, (factor, low, high, min_l2)
    out = []
    for coef, val, train in zip(l2, val_loss, train_loss):
        coef = max(0.0, float(coef))
        if math.isnan(val) or math.isnan(train):
            pass
        elif val > high * train:
            coef = max(coef * factor, min_l2)
        elif val < low * train:
            coef = max(coef / factor, min(coef, min_l2))
        out.append(coef)
    return out

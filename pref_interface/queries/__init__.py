"""Which pairs to ask about: the pool of recent clips, pair selection (§2.2.4), sorting, and
the label schedule."""

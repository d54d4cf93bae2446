"""The labelling role of the loop: clips in from the agent, pairs chosen (`queries`), answered
(`labellers`), committed to the label store (`store`) and sent to the predictor's trainer
(`process`)."""

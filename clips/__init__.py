"""The paper's unit of comparison, shared by the agent, the labelling and the predictor: a
clip of behaviour and a label on a pair of them (`clips.clip`), and the agent's side that cuts
clips from its rollouts and sends them on (`clips.cutter`, `clips.sender`, `clips.observer`)."""

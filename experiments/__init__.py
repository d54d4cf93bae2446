"""Scripts that reproduce the paper's milestones and turn run directories into figures."""

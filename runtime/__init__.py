"""What every process of a run uses, below the paper's parts: the TensorBoard scalar writer, the
choice of precision, how a process is set up (memory, name, ending with its parent), files put in
place whole, and the two ends of a queue between processes."""

"""One worker's training: the model, the one training loop (which knows no algorithm), evaluation,
the LR schedule, the real and virtual clocks with their calibration, and injected faults."""

"""What a run leaves on disk: the run record (records), the metrics log and its W&B mirror
(log), and checkpoints with the stop signals that make them (checkpoint)."""

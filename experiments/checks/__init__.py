"""The pre-flight's checks (experiments/preflight.py runs them in order): a job config's values
(values), the launcher, the devices, the data and the model against this machine (machine), and
W&B's answer for `wandb.mode=online` (wandb_login). The run (experiments/runner.py) runs the
machine's checks again and loads its data through them, so they live below both."""

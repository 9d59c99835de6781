"""What a run is: the typed config (schema), its identity (the digest that names a run) and the
generated reference of every key (config_doc). Imports nothing else of experiments/ but errors.

The rooms of experiments/, lowest first; a room imports only from the rooms below it (and
experiments/errors.py), tests/test_layout.py checks it:

    config    what a run is (schema, identity)
    data      datasets, CIFAR-10's files, the partition over workers
    store     what a run leaves on disk: records, metrics log and W&B, checkpoints
    training  one worker's training: models, the loop, evaluation, schedule, clocks, faults
    workers   how workers are started and talk: processes (dist), threads (sim), start-up
    (top)     runner (one run, start to end), worker (one worker's set-up and training),
              preflight (checks before any work), sweep (CLI)
"""

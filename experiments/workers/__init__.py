"""How a run's workers are started and talk: processes and their process groups (dist), threads
of one process (sim), and cheap process starts (startup)."""

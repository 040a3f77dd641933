"""Where a job runs: a fresh subprocess per job (the default launcher)."""

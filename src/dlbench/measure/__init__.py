"""How things are measured: timer, statistics, memory, environment, machine peak."""

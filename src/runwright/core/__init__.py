"""What every layer shares, below all of them: the records a run leaves (journal,
questions) and a schedule's, time (clock, waiting), the store calls' resilience, version
rules and the input checks every face applies once. It imports nothing of runwright but
errors, runs and the log helper, so every folder may import it."""

"""What the two SQL backends share: the columns and row mapping, the dialect seam, the
statements both run, the migration runner, and the store operations written once."""

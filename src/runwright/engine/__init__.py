"""The engine: worker (slots, claim loop), completer, supervisor of processes."""

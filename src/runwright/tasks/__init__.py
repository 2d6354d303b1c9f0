"""Tasks and their registry: what `@app.task` records, the registry of tasks, tools and
schedules by name, and how a submission becomes the store's insert (its arguments, limits,
budgets and retry policy). The engine is given a registry; the client side submits
through it."""

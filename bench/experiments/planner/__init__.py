"""bench plan: the search space, the search, and the commands that run what it finds."""

"""Training the tiny offline models on synthetic speech, on CPU (one command per model; seeded)."""

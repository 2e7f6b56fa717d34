"""Framework adapters. Each module imports its SDK lazily; nothing here imports an SDK."""
